package main

// stasis actor pause, suspend, resume and rm.

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

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
