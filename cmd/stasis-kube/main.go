// Command stasis-kube runs Stasis on Kubernetes (docs/kubernetes.md): the
// fleet controller, the node agent beside each node's stasisd, and the
// drain of a node.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/stasis-run/stasis/kube/fleet"
)

// globals are the flags every subcommand shares.
type globals struct {
	kubeconfig, namespace, leaseNamespace string
	leaseDuration                         time.Duration
	// qps and burst bound each client's requests to the API server, on
	// the client's side.
	qps   float32
	burst int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The watches' informers log through controller-runtime's logger:
	// into this command's log, as everything else.
	ctrllog.SetLogger(logr.FromSlogHandler(logger().Handler()))
	root := newRoot()
	root.SetArgs(os.Args[1:])
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "stasis-kube:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "stasis-kube",
		Short:         "Stasis on Kubernetes: the fleet controller, the node agent and drains",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fmt.Errorf("name a command: %s", "controller, agent, drain or undrain")
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&g.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: $KUBECONFIG, else the in-cluster service account)")
	f.StringVar(&g.namespace, "namespace", "default", "the namespace of the Actors, ActorTemplates and Snapshots served")
	f.StringVar(&g.leaseNamespace, "lease-namespace", fleet.DefaultLeaseNamespace, "the namespace of the nodes' Leases and the controller's leader lease")
	f.DurationVar(&g.leaseDuration, "lease-duration", fleet.DefaultLeaseDuration, "how long a node, or the leading controller, counts as alive after it last renewed its lease (an agent that cannot renew its node's lease pauses the node's actors after three quarters of it)")
	// client-go's own default (5 per second, bursts of 10) is below what one
	// pass of an agent with a few actors asks (a read and a status write per
	// actor per second): the passes and the renewals then queue behind it.
	// 50 and 100 are the kubelet's since Kubernetes 1.27.
	f.Float32Var(&g.qps, "kube-api-qps", 50, "requests per second to the API server, per client")
	f.IntVar(&g.burst, "kube-api-burst", 100, "requests to the API server allowed at once above --kube-api-qps, per client")
	// A Lease holds whole seconds: a duration it cannot hold would have the
	// agent time its renewals and pauses by one value and the controller
	// judge the node by another.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.leaseDuration < time.Second || g.leaseDuration%time.Second != 0 {
			return fmt.Errorf("--lease-duration %s: a Lease holds whole seconds; give one of at least 1s, such as %s (the default)", g.leaseDuration, fleet.DefaultLeaseDuration)
		}
		if g.qps <= 0 || g.burst < 1 {
			return fmt.Errorf("--kube-api-qps %v, --kube-api-burst %d: give a rate above 0 and a burst of at least 1", g.qps, g.burst)
		}
		return nil
	}
	root.AddCommand(newController(g), newAgent(g), newDrain(g, true), newDrain(g, false))
	return root
}

func (g *globals) config() (*rest.Config, error) {
	if g.kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", g.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", g.kubeconfig, err)
	}
	return cfg, nil
}

func (g *globals) client() (client.Client, *rest.Config, error) {
	cfg, err := g.config()
	if err != nil {
		return nil, nil, err
	}
	cfg.QPS, cfg.Burst = g.qps, g.burst
	scheme, err := fleet.Scheme()
	if err != nil {
		return nil, nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, cfg, err
}

func logger() *slog.Logger { return slog.New(slog.NewTextHandler(os.Stderr, nil)) }
