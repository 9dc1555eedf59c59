package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/errdefs"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// TestFleetOutOfServiceTaint: an operator taints a node
// node.kubernetes.io/out-of-service (Kubernetes' non-graceful shutdown)
// on a real API server, with a lease of a minute that does not lapse
// meanwhile: its actor is moved to the other node at once, well within the
// lease; the tainted node's agent removes its copy and runs none of its
// actors, also after a restart; a new actor pinned there is refused,
// saying why.
func TestFleetOutOfServiceTaint(t *testing.T) {
	f := newFleetLease(t, "60s")
	ctx := context.Background()
	a := f.addNode("node-a")
	f.addNode("node-b")
	f.template("counter")
	f.startOn("o1", "node-a") // free to move, still bound to node-a
	f.counter("o1", "incr")

	taint := func(on bool) {
		t.Helper()
		for range 10 {
			var node corev1.Node
			if err := f.cp.kube.Get(ctx, client.ObjectKey{Name: "node-a"}, &node); err != nil {
				t.Fatal(err)
			}
			node.Spec.Taints = nil
			if on {
				node.Spec.Taints = []corev1.Taint{{Key: fleet.OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
			}
			if err := f.cp.kube.Update(ctx, &node); err == nil {
				return
			}
		}
		t.Fatal("could not taint node-a")
	}
	start := time.Now()
	taint(true)
	s := f.await("o1", "running on node-b", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
	if took := time.Since(start); took > 45*time.Second {
		t.Fatalf("o1 was moved %s after the taint, not at once (the lease is 60s)", took)
	}
	t.Logf("o1 running on node-b %s after node-a was tainted: %s", time.Since(start).Round(time.Millisecond), s.Reason)
	waitForLong(t, "node-a's agent to remove its copy of o1", time.Minute, func() bool {
		_, err := a.d.api.InspectActor(ctx, "o1")
		return errors.Is(err, errdefs.ErrNotFound)
	})
	a.d.requireNoSandbox("o1")
	// Its agent reads the taint at its next renewal (a third of the lease).
	waitForLong(t, "node-a's agent to say it is out of service", time.Minute, func() bool { return a.agent.logHas("tainted out of service") })

	// The node comes back (its agent started again), still tainted: it
	// runs none of them, and nothing new is placed there.
	a.agent.kill()
	a.agent.start()
	f.createOn("o2", "node-a")
	f.await("o2", "refused on node-a", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Node == "" && strings.Contains(s.Reason, fleet.OutOfServiceTaint)
	})
	if local, err := a.d.api.ListActors(ctx); err != nil || len(local) != 0 {
		t.Fatalf("node-a, tainted, holds %+v %v", local, err)
	}
	if s := f.actor("o1").Status; !running(s) || s.Node != "node-b" {
		t.Fatalf("o1 after node-a's agent came back: %+v", s)
	}

	// Untainted, it takes actors again.
	taint(false)
	f.await("o2", "running on node-a", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-a" })
}
