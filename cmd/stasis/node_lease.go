package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

func newNodeLease(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Show this node's fleet lease: the right to run the actors a fleet bound here",
		Long: `Lease shows the fleet lease that a fleet agent (stasis-kube agent) holds in stasisd
and renews while its cluster lease holds. When it lapses, stasisd freezes every running
fleet actor (FENCED) and refuses to run or resume one, because the fleet may start them
on another node; a renewal that says they are still bound here thaws them. Without a
lease nothing is fenced.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.client().Lease(cmd.Context())
			if err != nil {
				return err
			}
			return g.print(l, describeLease(l))
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "release",
		Short: "Give the fleet lease up, for a node that leaves its fleet",
		Long: `Release gives the fleet lease up: nothing is fenced any more, and FENCED actors stay
so until "stasis actor resume" thaws them or "stasis actor rm" removes them. Only for a
node that leaves its fleet: while the fleet may move this node's actors elsewhere, a
resumed copy here would run twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := g.client().ReleaseLease(cmd.Context())
			if err != nil {
				return err
			}
			return g.print(l, describeLease(l))
		},
	})
	return cmd
}

func describeLease(l api.Lease) string {
	var b strings.Builder
	switch {
	case l.Holder == "":
		b.WriteString("no fleet lease: nothing is fenced\n")
	case l.Lapsed:
		fmt.Fprintf(&b, "held by %s, LAPSED at %s: running fleet actors are fenced, none runs or resumes\n", l.Holder, l.Until.Local().Format(time.RFC3339))
	default:
		fmt.Fprintf(&b, "held by %s until %s (%s left)\n", l.Holder, l.Until.Local().Format(time.RFC3339), time.Until(l.Until).Round(100*time.Millisecond))
	}
	if l.Holder != "" {
		fmt.Fprintf(&b, "bound here: %s\n", orNone(l.Bound))
	}
	if l.Epoch != 0 {
		fmt.Fprintf(&b, "epoch:      %d (renewals of an older one are refused)\n", l.Epoch)
	}
	fmt.Fprintf(&b, "fenced:     %s\n", orNone(l.Fenced))
	return b.String()
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, " ")
}
