package main

// stasis actor events.

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

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
