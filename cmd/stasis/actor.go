package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/units"
)

func newActor(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "actor", Short: "Run and drive actors through stasisd (run, ps, inspect, pause, suspend, resume, rm, events, exec)"}
	var requestID string
	var cold bool
	var fromStored string
	var id string
	var publish []string
	var netMode, netns string
	run := &cobra.Command{
		Use:   "run TEMPLATE [--id ID]",
		Short: "Start an actor of a template: from its golden snapshot when this node can, by booting otherwise",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.RunRequest{Template: args[0], ID: id, RequestID: requestID, Cold: cold, FromStored: fromStored,
				Network: api.Network{Mode: netMode, Netns: netns}}
			for _, p := range publish {
				port, err := api.ParsePort(p)
				if err != nil {
					return err
				}
				req.Ports = append(req.Ports, port)
			}
			if req.ID == "" {
				// Name it here, so that its progress can be followed.
				req.ID = api.NewActorID(args[0], requestID)
			}
			var a api.Actor
			err := g.follow(cmd.Context(), req.ID, func(ctx context.Context) (err error) {
				a, err = g.client().Run(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return g.print(a, describeActor(a))
		},
	}
	run.Flags().StringVar(&id, "id", "", "the actor's id (default: TEMPLATE-NUMBER)")
	run.Flags().BoolVar(&cold, "cold", false, "boot even when the template has a golden snapshot")
	run.Flags().StringVar(&fromStored, "from-stored", "", "start from this snapshot in stasisd's store (as another node pushed it) instead of from the template")
	run.Flags().StringVar(&requestID, "request-id", "", "makes a retry of this request harmless: the same id answers with the first request's result")
	run.Flags().StringArrayVarP(&publish, "publish", "p", nil, "publish a port as docker run -p does: [HOSTIP:]HOSTPORT:PORT (TCP), beside the template's; a connection that comes while the actor is paused or suspended wakes it; repeatable")
	run.Flags().StringVar(&netMode, "network", "", "the actor's network, over the template's: cni, netns (with --netns), host or none (default: the template's, else cni where CNI is installed)")
	run.Flags().StringVar(&netns, "netns", "", "the network namespace the actor joins, for --network netns (such as /var/run/netns/NAME)")
	cmd.AddCommand(run, newActorPS(g), newActorInspect(g), newActorEvents(g), newActorExec(g), newActorRm(g))
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

func newActorOp(g *globals, use, short string, call func(*api.Client, context.Context, api.OpRequest) (api.Actor, error)) *cobra.Command {
	var requestID string
	cmd := &cobra.Command{
		Use:   use + " ACTOR",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var a api.Actor
			err := g.follow(cmd.Context(), args[0], func(ctx context.Context) (err error) {
				a, err = call(g.client(), ctx, api.OpRequest{ID: args[0], RequestID: requestID})
				return err
			})
			if err != nil {
				return err
			}
			return g.print(a, describeActor(a))
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "makes a retry of this request harmless: the same id answers with the first request's result")
	return cmd
}

func newActorRm(g *globals) *cobra.Command {
	var requestID string
	var purge bool
	cmd := &cobra.Command{
		Use:   "rm ACTOR",
		Short: "Delete an actor from any state: sandbox, GPUs and local files freed; stored snapshots kept unless --purge",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var d api.Deleted
			err := g.follow(cmd.Context(), args[0], func(ctx context.Context) (err error) {
				d, err = g.client().Delete(ctx, api.DeleteRequest{ID: args[0], RequestID: requestID, Purge: purge})
				return err
			})
			if err != nil {
				return err
			}
			text := fmt.Sprintf("deleted %s\n", args[0])
			switch {
			case len(d.KeptSnapshots) > 0 && purge:
				text += fmt.Sprintf("  kept in the store: %s (snapshots it started from, which another actor or its template stored)\n", strings.Join(d.KeptSnapshots, ", "))
			case len(d.KeptSnapshots) > 0:
				text += fmt.Sprintf("  kept in the store: %s (stasis actor rm --purge deletes those this actor stored itself)\n", strings.Join(d.KeptSnapshots, ", "))
			}
			return g.print(d, text)
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "makes a retry of this request harmless: the same id answers with the first request's result")
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete from the store the snapshots this actor stored (never one it started from)")
	return cmd
}

// follow runs an operation on an actor and prints its new events while it
// runs (as JSON lines on stderr with --json), so long steps show progress.
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

func newActorPS(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ps",
		Short: "List actors",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			actors, err := g.client().ListActors(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ACTOR\tSTATE\tTEMPLATE\tADDRESS\tPORTS\tSNAPSHOT\tREASON")
			for _, a := range actors {
				snap := "-"
				if a.Snapshot != nil {
					snap = a.Snapshot.ID
				}
				addr, ports := "-", "-"
				if n := a.Network; n != nil {
					addr, ports = cmp.Or(n.Address, "-"), cmp.Or(portList(n.Ports), "-")
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Template, addr, ports, snap, a.Reason)
			}
			w.Flush()
			if actors == nil {
				actors = []api.Actor{}
			}
			return g.print(actors, b.String())
		},
	}
}

func newActorInspect(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect ACTOR",
		Short: "Show an actor: state, reason, latest snapshot, running operation",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := g.client().InspectActor(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return g.print(a, describeActor(a))
		},
	}
}

func newActorEvents(g *globals) *cobra.Command {
	var after int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "events ACTOR",
		Short: "Show an actor's history: every step of every operation, with its duration and outcome",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow {
				// One event a line as it is added (one JSON object a line
				// with --json), until interrupted or the actor is deleted.
				return g.client().Watch(cmd.Context(), args[0], after, func(e api.Event) {
					if g.json {
						_ = json.NewEncoder(g.stdout).Encode(e)
						return
					}
					fmt.Fprint(g.stdout, eventLine(e))
				})
			}
			res, err := g.client().Events(cmd.Context(), args[0], after)
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, e := range res.Events {
				b.WriteString(eventLine(e))
			}
			return g.print(res.Events, b.String())
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "only the events after this sequence number")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print each event as it is added, until interrupted or the actor is deleted")
	return cmd
}

func eventLine(e api.Event) string {
	line := e.Message
	if e.Error != "" {
		line = "FAILED: " + e.Error
	}
	return fmt.Sprintf("%s  %-10s %-14s %7.3fs  %s\n", e.At.Format("15:04:05.000"), e.Operation, e.Step, e.Duration, line)
}

func newActorExec(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "exec ACTOR -- COMMAND [ARGS...]",
		Short: "Run a command inside a running actor and print its output; exits with its exit code",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := g.client().Exec(cmd.Context(), api.ExecRequest{ID: args[0], Args: args[1:]})
			if err != nil {
				return err
			}
			if err := g.print(res, res.Stdout); err != nil {
				return err
			}
			if !g.json {
				fmt.Fprint(g.stderr, res.Stderr)
			}
			if res.ExitCode != 0 {
				return &exitError{code: res.ExitCode, msg: fmt.Sprintf("%s exited %d in %s", args[1], res.ExitCode, args[0])}
			}
			return nil
		},
	}
}
