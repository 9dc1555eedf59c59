package main

// stasis actor ps and inspect.

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

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
