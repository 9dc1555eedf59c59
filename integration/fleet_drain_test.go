package integration

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/kube/agent"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFleetDrainWithAHungAgent drains a node of more actors than its agent
// acts on at once (agent.Workers, 8) while the agent hangs (stops itself
// with SIGSTOP, at a failpoint) at each point of a release after stasisd
// suspended an actor and stored its snapshot: before anything is recorded
// in the cluster, after the Snapshot object, after the binding is given
// up. Every release the agent had seen was handed to stasisd at once, and
// the passes do not wait for them, so those suspends are all stored though
// the agent hung at the first; the node's lease lapses and each such actor
// resumes on the other node from its stored snapshot, its counter kept. An
// actor whose eviction the controller made after the agent hung was never
// suspended: it starts from its template (what a lost node loses). The agent, let go, records the
// Snapshots and removes its copies without running them.
func TestFleetDrainWithAHungAgent(t *testing.T) {
	// The fleet's default lease of 15 s, not the tests' 2 s: ten starts,
	// suspends and resumes at once on a loaded two-core machine can keep
	// stasisd from answering the agent within a sixth of a 6 s lease (CI's
	// May phase: 12 s boots), and the agent then freezes the node's
	// sandboxes, operations under way included (docs/kubernetes.md).
	f := newFleetLease(t, "15s")
	ctx := context.Background()
	a := f.addNode("node-a")
	b := f.addNode("node-b")
	f.template("counter")
	const perPoint = 10
	for i, point := range []string{agent.FailpointSuspended, agent.FailpointRecorded, agent.FailpointUnbound} {
		a.agent.kill()
		a.agent.env = []string{"STASIS_KUBE_FAILPOINT=" + point}
		a.agent.start()
		want := map[string]string{}
		var ids []string
		for j := range perPoint {
			id := fmt.Sprintf("h%d.x%d", i, j)
			ids = append(ids, id)
			f.createOn(id, "node-a")
		}
		for j, id := range ids {
			f.await(id, "running on node-a", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-a" })
			f.edit(id, func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
			for range i + j%3 + 1 {
				want[id] = f.counter(id, "incr")
			}
		}

		f.drain("node-a", true)
		waitForLong(t, "node-a's agent to hang at "+point, time.Minute, func() bool { return a.agent.logHas(point) })
		status := map[string]stasisv1alpha1.ActorStatus{}
		var kept []string
		for _, id := range ids {
			s := f.await(id, "running on node-b", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
			got := f.counter(id, "get")
			if _, err := b.d.api.InspectActor(ctx, id); err != nil {
				t.Error(err)
			}
			copyA, err := a.d.api.InspectActor(ctx, id)
			if err != nil || copyA.State != api.Suspended || copyA.Snapshot == nil || copyA.Snapshot.Stored == "" {
				// Its release was never handed to stasisd: its eviction
				// came after the agent hung. Frozen by the fence, it
				// starts from what the store holds of it: nothing, so its
				// template.
				if got != "0" && got != want[id] {
					t.Errorf("%s: %s, never suspended, counts %s on node-b; want %s, or 0 from its template", point, id, got, want[id])
				}
				continue
			}
			kept = append(kept, id)
			status[id] = s
			if got != want[id] || copyA.Snapshot.Stored != s.Snapshot {
				t.Errorf("%s: %s's counter on node-b after its drain: %s, want %s, from node-a's stored %s (status %+v)", point, id, got, want[id], copyA.Snapshot.Stored, s)
			}
		}
		t.Logf("%s: %d of %d drained actors' suspends stored and kept", point, len(kept), len(ids))
		if len(kept) == 0 {
			t.Errorf("%s: no drained actor's suspend was stored; want at least the one the agent hung at", point)
		}
		if t.Failed() {
			t.FailNow()
		}

		a.agent.signal(syscall.SIGCONT)
		for _, id := range kept {
			waitForLong(t, "node-a to remove its copy of "+id, time.Minute, func() bool {
				_, err := a.d.api.InspectActor(ctx, id)
				return errors.Is(err, errdefs.ErrNotFound)
			})
			a.d.requireNoSandbox(id)
			var snaps stasisv1alpha1.SnapshotList
			if err := f.cp.kube.List(ctx, &snaps, client.InNamespace("default"), client.MatchingLabels{"stasis.dev/actor": id}); err != nil {
				t.Fatal(err)
			}
			if s := status[id]; len(snaps.Items) != 1 || snaps.Items[0].Spec.StoreName != s.Snapshot || snaps.Items[0].Spec.Node != "node-a" {
				t.Fatalf("%s: the Snapshots of %s: %+v; want the one node-a stored, %s", point, id, snaps.Items, s.Snapshot)
			}
			if got := f.counter(id, "get"); got != want[id] {
				t.Fatalf("%s: %s's counter after node-a came back: %s, want %s", point, id, got, want[id])
			}
		}
		f.drain("node-a", false)
	}
}
