package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFleetNodeClockOffset gives node-b a clock half a lease behind, then
// half a lease ahead (its agent writes its Lease's times so), stops its
// agent, and checks with the monitor that no actor ever runs on two nodes:
// the controller counts a node lost a lease after it saw the last renewal,
// on its own clock, and so never before stasisd's fence (three quarters of
// a lease after the renewal, on the node's own clock). Judged on the times
// the node wrote, a node half a lease behind was counted lost at half a
// lease, before its fence.
func TestFleetNodeClockOffset(t *testing.T) {
	const lease = 6 * time.Second
	f := newFleetLease(t, "6s")
	ctx := context.Background()
	f.addNode("node-a")
	b := f.addNode("node-b")
	f.template("counter")
	ids := []string{"c1", "c10"}
	mon := f.watch(ids)
	defer mon.stop()
	for _, offset := range []time.Duration{-lease / 2, lease / 2} {
		b.agent.kill()
		b.agent.env = []string{fmt.Sprintf("STASIS_KUBE_CLOCK_OFFSET=%s", offset)}
		b.agent.start()
		for _, id := range ids {
			var a stasisv1alpha1.Actor
			if err := f.cp.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: id}, &a); err != nil {
				f.createOn(id, "node-b")
			} else {
				f.edit(id, func(s *stasisv1alpha1.ActorSpec) { s.Node = "node-b" })
			}
		}
		for _, id := range ids {
			f.await(id, "running on node-b", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
			f.edit(id, func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
		}
		start := time.Now()
		b.agent.signal(syscall.SIGSTOP)
		for _, id := range ids {
			f.await(id, "running on node-a", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-a" })
		}
		if took := time.Since(start); took < lease {
			t.Fatalf("clock off by %s: the actors ran on node-a %s after node-b's agent stopped, before its lease of %s ran out", offset, took, lease)
		}
		t.Logf("CLOCK node-b's clock off by %s: its actors ran on node-a %.1f s after its agent stopped", offset, time.Since(start).Seconds())
		b.agent.signal(syscall.SIGCONT)
		for _, id := range ids {
			waitForLong(t, "node-b to remove its copy of "+id, time.Minute, func() bool {
				_, err := b.d.api.InspectActor(ctx, id)
				return err != nil && !strings.Contains(err.Error(), "cannot reach")
			})
		}
	}
	if v := mon.stop(); len(v) > 0 {
		t.Fatalf("actors ran on two nodes at once (%d of %d samples):\n%s", len(v), mon.samples, strings.Join(v, "\n"))
	}
}
