package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// newDrain is `drain NODE` (on) or `undrain NODE` (off).
func newDrain(g *globals, on bool) *cobra.Command {
	var wait time.Duration
	use, short := "drain NODE", "Move every actor off a node and place none there"
	if !on {
		use, short = "undrain NODE", "Let actors be placed on a node again"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kube, _, err := g.client()
			if err != nil {
				return err
			}
			ctx, name := cmd.Context(), args[0]
			var node corev1.Node
			if err := kube.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
				return err
			}
			patch := client.MergeFrom(node.DeepCopy())
			if node.Annotations == nil {
				node.Annotations = map[string]string{}
			}
			if on {
				node.Annotations[fleet.DrainAnnotation] = "true"
			} else {
				delete(node.Annotations, fleet.DrainAnnotation)
			}
			if err := kube.Patch(ctx, &node, patch); err != nil {
				return err
			}
			if !on || wait == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "node %s: %s\n", name, map[bool]string{true: "draining", false: "open for actors"}[on])
				return nil
			}
			deadline := time.Now().Add(wait)
			for {
				var actors stasisv1alpha1.ActorList
				if err := kube.List(ctx, &actors, client.InNamespace(g.namespace)); err != nil {
					return err
				}
				left := 0
				for _, a := range actors.Items {
					if a.Status.Node == name {
						left++
					}
				}
				if left == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "node %s: drained\n", name)
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("node %s: %d actor(s) still bound after %s; the drain goes on", name, left, wait)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(500 * time.Millisecond):
				}
			}
		},
	}
	if on {
		cmd.Flags().DurationVar(&wait, "wait", 0, "wait until no actor is bound to the node, at most this long")
	}
	return cmd
}
