package main

// stasis events.

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

func newEvents(g *globals) *cobra.Command {
	var after int64
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print every actor's events as they are added, until interrupted (docker events)",
		Long: `Print every actor's events on this node as they are added (every step of every
operation, with its duration and outcome, the actor first), until interrupted.
--after N first prints the history after sequence number N (0: all of it; the
numbers count across every actor, as each line's seq shows with --json). --json
prints one object a line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			if !cmd.Flags().Changed("after") {
				// From now: the newest event so far.
				res, err := c.Events(cmd.Context(), "", math.MaxInt64)
				if err != nil {
					return err
				}
				after = res.Last
			}
			return c.Watch(cmd.Context(), "", after, func(e api.Event) {
				if g.json {
					_ = json.NewEncoder(g.stdout).Encode(e)
					return
				}
				fmt.Fprintf(g.stdout, "%-16s %s", e.Actor, eventLine(e))
			})
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "first print the history after this sequence number (0: all of it); without it, only what is added from now")
	return cmd
}
