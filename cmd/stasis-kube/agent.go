package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/kube/agent"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

func newAgent(g *globals) *cobra.Command {
	var node, socket, address string
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent beside this node's stasisd",
		Long: `Agent publishes this node's fingerprint on its Node (an annotation and labels,
NVIDIA GPU Feature Discovery's names where they exist) and a Lease, and runs the
Actors bound to this node through the local stasisd. Before its first lease it removes
this node's copies of actors bound elsewhere, without running them. It renews the
Lease only while stasisd answers, and after each renewal renews stasisd's own fleet
lease, whose lapse makes stasisd freeze the node's actors (docs/kubernetes.md,
"Fencing"); when stasisd does not answer, it freezes them itself with the runsc
commands stasisd gave it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube, cfg, err := g.client()
			if err != nil {
				return err
			}
			// The passes read this node's actors and the templates from
			// watches: at rest they ask the API server nothing, and only
			// what changes on this node is sent.
			watch, err := watched(cmd.Context(), cfg, kube, cache.Options{
				DefaultNamespaces: map[string]cache.Config{g.namespace: {}},
				ByObject:          map[client.Object]cache.ByObject{&stasisv1alpha1.Actor{}: {Field: fields.OneTermEqualSelector(fleet.NodeField, node)}},
			}, &stasisv1alpha1.Actor{}, &stasisv1alpha1.ActorTemplate{})
			if err != nil {
				return err
			}
			wake, err := agent.ReleaseAsked(cmd.Context(), watch)
			if err != nil {
				return err
			}
			// The renewals have a client of their own, as the kubelet's
			// heartbeats do: the passes' requests never queue them.
			leaseKube, _, err := g.client()
			if err != nil {
				return err
			}
			var offset time.Duration
			if v := os.Getenv("STASIS_KUBE_CLOCK_OFFSET"); v != "" {
				// The fault tests' way to skew one node's clock.
				if offset, err = time.ParseDuration(v); err != nil {
					return fmt.Errorf("STASIS_KUBE_CLOCK_OFFSET=%q: %w", v, err)
				}
			}
			a := &agent.Agent{Kube: kube, LeaseKube: leaseKube, Watched: watch, Wake: wake, Stasisd: api.Dial(socket), Node: node, Namespace: g.namespace,
				LeaseNamespace: g.leaseNamespace, LeaseDuration: g.leaseDuration, Log: logger(),
				// The fault tests' way to hang the agent between the steps
				// of a release (agent.Failpoint…).
				Failpoint: os.Getenv("STASIS_KUBE_FAILPOINT"), ClockOffset: offset, Address: address}
			return a.Run(cmd.Context())
		},
	}
	host, _ := os.Hostname()
	cmd.Flags().StringVar(&node, "node", envOr("NODE_NAME", host), "this node's name in the cluster (default: $NODE_NAME, else the hostname)")
	cmd.Flags().StringVar(&socket, "socket", api.DefaultSocket, "the local stasisd's socket")
	cmd.Flags().StringVar(&address, "node-address", os.Getenv("NODE_IP"), "the address at which this node's published ports are reached, in the actors' endpoints (default: $NODE_IP, else the Node's InternalIP)")
	return cmd
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
