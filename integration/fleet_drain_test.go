package integration

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/kube/agent"
	stasisv1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFleetDrainWithAHungAgent drains a node whose agent hangs (stops
// itself with SIGSTOP, at a failpoint) at each point of a release after
// stasisd suspended the actor and stored its snapshot: before anything is
// recorded in the cluster, after the Snapshot object, after the binding is
// given up. The node's lease lapses and the actor resumes on the other
// node from that stored snapshot, its counter kept (before, with nothing
// recorded, it started again from its template at 0: the state of a drain
// lost). The agent, let go, records the Snapshot and removes its copy
// without running it.
func TestFleetDrainWithAHungAgent(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	a := f.addNode("node-a")
	b := f.addNode("node-b")
	f.template("counter")
	for i, point := range []string{agent.FailpointSuspended, agent.FailpointRecorded, agent.FailpointUnbound} {
		a.agent.kill()
		a.agent.env = []string{"STASIS_KUBE_FAILPOINT=" + point}
		a.agent.start()
		id := fmt.Sprintf("h%d.x", i)
		if err := f.cp.kube.Create(ctx, &stasisv1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: id}, Spec: stasisv1.ActorSpec{Template: "counter", Node: "node-a"}}); err != nil {
			t.Fatal(err)
		}
		f.await(id, "running on node-a", func(s stasisv1.ActorStatus) bool { return running(s) && s.Node == "node-a" })
		f.edit(id, func(s *stasisv1.ActorSpec) { s.Node = "" })
		var want string
		for range i + 2 {
			want = f.counter(id, "incr")
		}

		f.drain("node-a", true)
		waitForLong(t, "node-a's agent to hang at "+point, time.Minute, func() bool { return a.agent.logHas(point) })
		s := f.await(id, "running on node-b", func(s stasisv1.ActorStatus) bool { return running(s) && s.Node == "node-b" })
		if got := f.counter(id, "get"); got != want {
			t.Fatalf("%s: %s's counter on node-b after its drain: %s, want %s (status %+v)", point, id, got, want, s)
		}
		stored, err := a.d.api.InspectActor(ctx, id)
		if err != nil || stored.Snapshot == nil || stored.Snapshot.Stored != s.Snapshot {
			t.Fatalf("%s: node-a's copy of %s: %+v %v; want it suspended to %s", point, id, stored, err, s.Snapshot)
		}
		if _, err := b.d.api.InspectActor(ctx, id); err != nil {
			t.Fatal(err)
		}

		a.agent.signal(syscall.SIGCONT)
		waitForLong(t, "node-a to remove its copy of "+id, time.Minute, func() bool {
			_, err := a.d.api.InspectActor(ctx, id)
			return errors.Is(err, errdefs.ErrNotFound)
		})
		a.d.requireNoSandbox(id)
		var snaps stasisv1.SnapshotList
		if err := f.cp.kube.List(ctx, &snaps, client.InNamespace("default"), client.MatchingLabels{"stasis.dev/actor": id}); err != nil {
			t.Fatal(err)
		}
		if len(snaps.Items) != 1 || snaps.Items[0].Spec.StoreName != s.Snapshot || snaps.Items[0].Spec.Node != "node-a" {
			t.Fatalf("%s: the Snapshots of %s: %+v; want the one node-a stored, %s", point, id, snaps.Items, s.Snapshot)
		}
		if got := f.counter(id, "get"); got != want {
			t.Fatalf("%s: %s's counter after node-a came back: %s, want %s", point, id, got, want)
		}
		f.drain("node-a", false)
	}
}
