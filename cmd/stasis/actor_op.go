package main

// stasis actor pause, suspend, resume and rm.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
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
	var purge, force bool
	cmd := &cobra.Command{
		Use:     "rm ACTOR...",
		Aliases: []string{"delete"},
		Short:   "Delete actors from any state: sandbox, GPUs and local files freed; stored snapshots kept unless --purge",
		Long: `Delete actors from any state: sandbox, GPUs and local files freed; stored
snapshots kept unless --purge. Several actors are deleted one after another; one
that fails does not stop the others, and the command then exits with the code of
the first failure. -f (as rm -f) takes an actor that does not exist as deleted,
and deletes one whose network's CNI plugins fail or never answer (--cni-timeout)
anyway: its namespace and ports are removed, and what the plugins may still hold
(an address, a host interface) is said.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if requestID != "" && len(args) > 1 {
				return errdefs.Mark(errors.New("--request-id names one request: give it with one actor"), errdefs.ErrInvalidArgument)
			}
			var all []api.Deleted
			var text strings.Builder
			var failed []string
			var first error
			for _, id := range args {
				var d api.Deleted
				err := g.follow(cmd.Context(), id, func(ctx context.Context) (err error) {
					d, err = g.client().Delete(ctx, api.DeleteRequest{ID: id, RequestID: requestID, Purge: purge, Force: force})
					return err
				})
				if force && errors.Is(err, errdefs.ErrNotFound) {
					d, err = api.Deleted{ID: id}, nil
				}
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", id, err))
					first = cmp.Or(first, err)
					continue
				}
				all = append(all, d)
				fmt.Fprintf(&text, "deleted %s\n", id)
				if d.NetworkLeft != "" {
					fmt.Fprintf(&text, "  its network, forced past: %s\n", d.NetworkLeft)
				}
				switch {
				case len(d.KeptSnapshots) > 0 && purge:
					fmt.Fprintf(&text, "  kept in the store: %s (snapshots it started from, which another actor or its template stored)\n", strings.Join(d.KeptSnapshots, ", "))
				case len(d.KeptSnapshots) > 0:
					fmt.Fprintf(&text, "  kept in the store: %s (stasis actor rm --purge deletes those this actor stored itself)\n", strings.Join(d.KeptSnapshots, ", "))
				}
			}
			switch {
			case len(args) == 1 && first != nil:
				return first
			case first != nil:
				// What was deleted is said before the failures.
				if !g.json {
					fmt.Fprint(g.stdout, text.String())
				}
				// The exit code is the first failure's.
				return errdefs.Mark(fmt.Errorf("%d of %d actors not deleted: %s", len(failed), len(args), strings.Join(failed, "; ")), errdefs.Of(first).Err)
			case len(args) == 1:
				return g.print(all[0], text.String())
			}
			return g.print(all, text.String())
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "makes a retry of this request harmless: the same id answers with the first request's result (one actor only)")
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete from the store the snapshots this actor stored (never one it started from)")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "an actor that does not exist is no failure; one whose network's plugins cannot remove it is deleted anyway")
	return cmd
}

// follow runs an operation on an actor and prints its new events while it
// runs (as JSON lines on stderr with --json), so long steps show progress.
