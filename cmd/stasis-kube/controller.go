package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/compat"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/controller"
	"github.com/stasis-run/stasis/store/location"
)

// leaderLease names the lease the controllers elect their leader with.
const leaderLease = "stasis-controller"

func newController(g *globals) *cobra.Command {
	var storeLoc string
	var ignoreCPUFlags bool
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the fleet controller: placement, drains, lost nodes",
		Long: `Controller binds Actors to nodes, checking the snapshot each resumes from against
every node's fingerprint (the reasons go in the Actor's status when no node fits),
moves every actor off a draining node, and rebinds the actors of a node whose lease
expired, to resume elsewhere from their last stored snapshot. Run it as one Deployment:
its replicas elect one leader through a Lease.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			direct, cfg, err := g.client()
			if err != nil {
				return err
			}
			// The passes read from watches: at rest they ask the API server
			// nothing. Every write is conditional on the version read, so a
			// cache a moment behind costs a conflict, retried on the next
			// pass, never a write over a newer one.
			watch, err := watched(cmd.Context(), cfg, direct, cache.Options{
				DefaultNamespaces: map[string]cache.Config{g.namespace: {}},
				ByObject:          map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Namespaces: map[string]cache.Config{g.leaseNamespace: {}}}},
			}, &stasisv1alpha1.Actor{}, &stasisv1alpha1.ActorTemplate{}, &corev1.Node{}, &coordinationv1.Lease{}, &corev1.Service{}, &discoveryv1.EndpointSlice{})
			if err != nil {
				return err
			}
			kube, err := client.New(cfg, client.Options{Scheme: direct.Scheme(), Cache: &client.CacheOptions{Reader: watch}})
			if err != nil {
				return err
			}
			if storeLoc == "" {
				return errors.New("--store is needed: the shared store the nodes push to, read for the manifests of the snapshots actors resume from")
			}
			repo, err := location.Repository(cmd.Context(), storeLoc, false)
			if err != nil {
				return err
			}
			log := logger()
			c := &controller.Controller{Kube: kube, Repo: repo, Namespace: g.namespace, LeaseNamespace: g.leaseNamespace,
				Policy: compat.Policy{IgnoreCPUFlags: ignoreCPUFlags}, Log: log,
				// A test hook: the point of a rebind at which the controller
				// stops itself (controller.Failpoint…).
				Failpoint: os.Getenv("STASIS_KUBE_FAILPOINT")}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			host, _ := os.Hostname()
			id := fmt.Sprintf("%s-%d", host, os.Getpid())
			lock := &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: g.leaseNamespace, Name: leaderLease},
				Client:     cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: id},
			}
			// A replica that loses the lead (its renewal too slow on a
			// loaded API server) stops acting at once and campaigns again,
			// rather than exit and wait to be restarted; its passes read
			// everything afresh in each term.
			for {
				ctx, cancel := context.WithCancel(cmd.Context())
				var runErr error
				leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
					Lock: lock, ReleaseOnCancel: true,
					LeaseDuration: g.leaseDuration, RenewDeadline: g.leaseDuration * 2 / 3, RetryPeriod: max(g.leaseDuration/8, 100*time.Millisecond),
					Callbacks: leaderelection.LeaderCallbacks{
						OnStartedLeading: func(ctx context.Context) { runErr = c.Run(ctx); cancel() },
						OnStoppedLeading: cancel,
					},
				})
				cancel()
				switch {
				case cmd.Context().Err() != nil:
					return nil
				case runErr != nil && !errors.Is(runErr, context.Canceled):
					return runErr
				}
				log.Warn("the controller lost the lead; campaigning again", "lease", g.leaseNamespace+"/"+leaderLease)
			}
		},
	}
	cmd.Flags().StringVar(&storeLoc, "store", "", "the shared snapshot store (a folder or s3://BUCKET/PREFIX?endpoint=...; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	cmd.Flags().BoolVar(&ignoreCPUFlags, "ignore-cpu-flags", false, "place restores without checking the nodes' CPU features (for fleets whose runtime masks them)")
	return cmd
}
