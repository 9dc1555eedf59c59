package main

// stasis actor run: a new actor of a template.

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
)

func newActorRun(g *globals) *cobra.Command {
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
	run.Flags().StringArrayVarP(&publish, "publish", "p", nil, "publish a port as docker run -p does: [HOSTIP:]HOSTPORT:PORT (TCP; PORT alone or host port 0: a free host port, kept for the actor), beside the template's; a connection that comes while the actor is paused or suspended wakes it; repeatable")
	run.Flags().StringVar(&netMode, "network", "", "the actor's network, over the template's: cni, netns (with --netns), host or none (default: the template's, else cni where CNI is installed)")
	run.Flags().StringVar(&netns, "netns", "", "the network namespace the actor joins, for --network netns (such as /var/run/netns/NAME)")
	return run
}
