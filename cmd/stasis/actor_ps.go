package main

// stasis actor ps and inspect.

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
)

func newActorPS(g *globals) *cobra.Command {
	var quiet, all bool
	var output string
	cmd := &cobra.Command{
		Use:     "ps",
		Aliases: []string{"ls", "list"},
		Short:   "List actors, whatever their state",
		Long: `List actors, whatever their state.

-o wide adds each actor's sandbox, its latest snapshot's store name and size, and the step
of the operation it is in; -o json is --json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wide := false
			switch output {
			case "", "table":
			case "wide":
				wide = true
			case "json":
				g.json = true
			default:
				return errdefs.Mark(fmt.Errorf("ps -o %q: the output is table (the default), wide or json", output), errdefs.ErrInvalidArgument)
			}
			actors, err := g.client().ListActors(cmd.Context())
			if err != nil {
				return err
			}
			if actors == nil {
				actors = []api.Actor{}
			}
			var b strings.Builder
			if quiet {
				for _, a := range actors {
					fmt.Fprintln(&b, a.ID)
				}
				return g.print(actors, b.String())
			}
			now := time.Now()
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			header := "ACTOR\tSTATE\tTEMPLATE\tRUNTIME\tCREATED\tSTATUS\tADDRESS\tPORTS\tSNAPSHOT\tREASON"
			if wide {
				header += "\tSANDBOX\tSTORED\tSIZE\tSTEP"
			}
			fmt.Fprintln(w, header)
			for _, a := range actors {
				snap := "-"
				if a.Snapshot != nil {
					snap = a.Snapshot.ID
				}
				addr, ports := "-", "-"
				if n := a.Network; n != nil {
					addr, ports = cmp.Or(n.Address, "-"), cmp.Or(portList(n.Ports), "-")
				}
				reason := a.Reason
				if wide {
					reason = cmp.Or(reason, "-") // a column of its own, not the last
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s ago\t%s\t%s\t%s\t%s\t%s", a.ID, a.State, a.Template, cmp.Or(a.Runtime, api.RuntimeGVisor), humanDuration(now.Sub(a.CreatedAt)), status(a, now), addr, ports, snap, reason)
				if wide {
					stored, size, step := "-", "-", "-"
					if a.Snapshot != nil {
						stored, size = cmp.Or(a.Snapshot.Stored, "-"), units.Bytes(a.Snapshot.SizeBytes)
					}
					if a.Operation != nil {
						step = a.Operation.Kind + ": " + cmp.Or(a.Operation.Step, "starting")
					}
					fmt.Fprintf(w, "\t%s\t%s\t%s\t%s", cmp.Or(a.Sandbox, "-"), stored, size, step)
				}
				fmt.Fprintln(w)
			}
			w.Flush()
			return g.print(actors, b.String())
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the actors' ids, one a line")
	// docker ps lists running containers unless -a; stasis lists every
	// actor: -a is taken for the hands that type it.
	cmd.Flags().BoolVarP(&all, "all", "a", true, "list every actor (always so: taken for docker's habit)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, wide (more columns) or json")
	return cmd
}

// status is an actor's STATUS as docker ps says a container's: "Up 5
// minutes", "Exited (3) 2 minutes ago", "Paused 1 hour".
func status(a api.Actor, now time.Time) string {
	since := humanDuration(now.Sub(a.UpdatedAt))
	switch {
	case a.Operation != nil:
		return fmt.Sprintf("%s (%s) for %s", strings.ToLower(string(a.State)), a.Operation.Kind, humanDuration(now.Sub(a.Operation.StartedAt)))
	case a.State == api.Running:
		return "Up " + since
	case !a.ExitedAt.IsZero():
		code := strconv.Itoa(a.ExitCode)
		if a.ExitCode == api.ExitUnknown {
			code = "?"
		}
		return fmt.Sprintf("Exited (%s) %s ago", code, humanDuration(now.Sub(a.ExitedAt)))
	case a.Idle:
		return fmt.Sprintf("%s (idle) %s", capitalized(a.State), since)
	}
	return fmt.Sprintf("%s %s", capitalized(a.State), since)
}

func capitalized(s api.State) string {
	l := strings.ToLower(string(s))
	return strings.ToUpper(l[:1]) + l[1:]
}

// humanDuration says d as docker does: "Less than a second", "5 seconds",
// "About a minute", "3 hours", "2 days", "3 weeks", "4 months", "2 years".
func humanDuration(d time.Duration) string {
	switch s := int(d.Seconds()); {
	case s < 1:
		return "Less than a second"
	case s == 1:
		return "1 second"
	case s < 60:
		return fmt.Sprintf("%d seconds", s)
	}
	switch m := int(d.Minutes()); {
	case m == 1:
		return "About a minute"
	case m < 60:
		return fmt.Sprintf("%d minutes", m)
	}
	switch h := int(d.Round(time.Hour).Hours()); {
	case h == 1:
		return "About an hour"
	case h < 48:
		return fmt.Sprintf("%d hours", h)
	case h < 24*7*2:
		return fmt.Sprintf("%d days", h/24)
	case h < 24*30*2:
		return fmt.Sprintf("%d weeks", h/24/7)
	case h < 24*365*2:
		return fmt.Sprintf("%d months", h/24/30)
	default:
		return fmt.Sprintf("%d years", h/24/365)
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
