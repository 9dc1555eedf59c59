package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/units"
)

func newActor(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "actor", Short: "Run and drive actors through stasisd (run, ps, inspect, pause, suspend, resume, rm, events, logs, exec)"}
	cmd.AddCommand(newActorRun(g), newActorPS(g), newActorInspect(g), newActorEvents(g), newActorLogs(g), newActorExec(g), newActorRm(g))
	for _, v := range []struct {
		use, short string
		call       func(*api.Client, context.Context, api.OpRequest) (api.Actor, error)
	}{
		{"pause", "Snapshot an actor into a snapshot kept on this node (PAUSED); stasisd keeps its sandbox frozen in memory, GPU released, while the node has room (--keep-paused), else stops it", (*api.Client).Pause},
		{"suspend", "Commit an actor: its snapshot goes to the store and its sandbox stops (SUSPENDED)", (*api.Client).Suspend},
		{"resume", "Bring a PAUSED, SUSPENDED or CRASHED actor back from its latest snapshot", (*api.Client).Resume},
	} {
		cmd.AddCommand(newActorOp(g, v.use, v.short, v.call))
	}
	return cmd
}

func (g *globals) follow(ctx context.Context, id string, op func(context.Context) error) error {
	return g.client().Follow(ctx, id, op, g.printEvent)
}

func (g *globals) printEvent(e api.Event) {
	if g.json {
		g.emit(e)
		return
	}
	if e.Error != "" {
		fmt.Fprintf(g.stderr, "  %-14s failed after %.3fs: %s\n", e.Step, e.Duration, e.Error)
	} else {
		fmt.Fprintf(g.stderr, "  %-14s %7.3fs  %s\n", e.Step, e.Duration, e.Message)
	}
}

func describeActor(a api.Actor) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s (template %s, sandbox %s)\n", a.ID, a.State, a.Template, a.Sandbox)
	if a.Reason != "" {
		fmt.Fprintf(&b, "  reason:    %s\n", a.Reason)
	}
	if !a.ExitedAt.IsZero() {
		status := fmt.Sprintf("status %d", a.ExitCode)
		if a.ExitCode == api.ExitUnknown {
			status = "how unknown"
		}
		fmt.Fprintf(&b, "  exited:    %s at %s\n", status, a.ExitedAt.Local().Format(time.RFC3339))
	}
	if a.Snapshot != nil {
		fmt.Fprintf(&b, "  snapshot:  %s\n", describeSnapshotLine(*a.Snapshot))
	}
	if n := a.Network; n != nil {
		fmt.Fprintf(&b, "  network:   %s", n.Mode)
		if n.Address != "" {
			fmt.Fprintf(&b, ", address %s", n.Address)
		}
		if len(n.Ports) > 0 {
			fmt.Fprintf(&b, ", published %s", portList(n.Ports))
		}
		b.WriteString("\n")
	}
	if o := a.Operation; o != nil {
		fmt.Fprintf(&b, "  operation: %s %s, step %s, since %s", o.Kind, o.ID, o.Step, o.StartedAt.Format(time.RFC3339))
		if !o.Deadline.IsZero() {
			fmt.Fprintf(&b, ", rolled back if not done by %s", o.Deadline.Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// portList is published ports as docker ps shows them: HOSTIP:HOSTPORT->PORT.
func portList(ports []api.Port) string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = fmt.Sprintf("%s->%d", net.JoinHostPort(cmp.Or(p.HostIP, "0.0.0.0"), strconv.Itoa(p.HostPort)), p.ContainerPort)
	}
	return strings.Join(out, ", ")
}

func describeSnapshotLine(s api.Snapshot) string {
	where := []string{}
	if s.Dir != "" {
		where = append(where, "on this node at "+s.Dir)
	}
	if s.Stored != "" {
		where = append(where, "stored as "+s.Stored)
	}
	return fmt.Sprintf("%s (%s, %s, %s; %s)", s.ID, s.Kind, s.Scope, units.Bytes(s.SizeBytes), strings.Join(where, ", "))
}
