package agent

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// TestPassesGoOnBesideReleases: a pass hands a release (a drain's
// eviction) to stasisd and does not wait for it, so that an eviction made
// while the first suspend still runs is handed on by the next pass, not
// once the first has ended; a release under way is never asked twice, and
// its copy is not taken for one bound nowhere meanwhile.
func TestPassesGoOnBesideReleases(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	actor := func(name string, evict bool) *stasisv1alpha1.Actor {
		return &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a", Phase: stasisv1alpha1.PhaseRunning, Evict: evict}}
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(actor("d.1", true), actor("d.2", false)).
		WithStatusSubresource(&stasisv1alpha1.Actor{}).Build()
	stasisd := &fakeStasisd{
		actors: []*stasisv1.Actor{
			{Id: "d.1", Template: "t", State: "RUNNING"},
			{Id: "d.2", Template: "t", State: "RUNNING"},
		},
		suspendGate:  make(chan struct{}),
		suspendAsked: make(chan string, 4),
	}
	a := &Agent{Kube: kube, Stasisd: startFakeStasisd(t, stasisd), Node: "node-a", Namespace: "default",
		Workers: 1, Log: slog.New(slog.DiscardHandler)}
	pass := func(what string) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- a.pass(ctx, true) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: the pass waits for the suspends it handed to stasisd", what)
		}
	}
	pass("first pass")
	if got := <-stasisd.suspendAsked; got != "d.1" {
		t.Fatalf("suspend asked of %s; want d.1's", got)
	}

	// d.2 is evicted while d.1's suspend runs.
	var d2 stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "d.2"}, &d2); err != nil {
		t.Fatal(err)
	}
	d2.Status.Evict = true
	if err := kube.Status().Update(ctx, &d2); err != nil {
		t.Fatal(err)
	}
	pass("second pass")
	if got := <-stasisd.suspendAsked; got != "d.2" {
		t.Fatalf("suspend asked of %s; want d.2's, evicted after the first pass", got)
	}
	// The controller counts the node lost meanwhile and binds d.1
	// nowhere: its copy here is its release's to end, not removed by a
	// pass beside it.
	var d1 stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "d.1"}, &d1); err != nil {
		t.Fatal(err)
	}
	d1.Status.Node = ""
	if err := kube.Status().Update(ctx, &d1); err != nil {
		t.Fatal(err)
	}
	pass("third pass")
	if deleted := stasisd.deletes(); len(deleted) != 0 {
		t.Fatalf("copies removed while their releases ran: %v", deleted)
	}

	close(stasisd.suspendGate)
	a.released.Wait()
	got := stasisd.suspends()
	slices.Sort(got)
	if !slices.Equal(got, []string{"d.1", "d.2"}) {
		t.Fatalf("suspends asked: %v; want one each of d.1 and d.2", got)
	}
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "d.2"}, &d2); err != nil {
		t.Fatal(err)
	}
	if d2.Status.Node != "" || d2.Status.Snapshot != "d.2.snap-000000000001" {
		t.Fatalf("d.2 after its release: bound to %q, snapshot %q; want bound nowhere, its suspend recorded", d2.Status.Node, d2.Status.Snapshot)
	}
	var snaps stasisv1alpha1.SnapshotList
	if err := kube.List(ctx, &snaps, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, s := range snaps.Items {
		recorded = append(recorded, s.Spec.StoreName)
	}
	slices.Sort(recorded)
	if !slices.Equal(recorded, []string{"d.1.snap-000000000001", "d.2.snap-000000000001"}) {
		t.Fatalf("Snapshots recorded: %v; want both suspends'", recorded)
	}
	// d.1's release found it bound elsewhere and left its copy; the next
	// pass removes it.
	if deleted := stasisd.deletes(); !slices.Equal(deleted, []string{"d.2"}) {
		t.Fatalf("copies removed by the releases: %v; want d.2's", deleted)
	}
	pass("fourth pass")
	if deleted := stasisd.deletes(); !slices.Equal(slices.Sorted(slices.Values(deleted)), []string{"d.1", "d.2"}) {
		t.Fatalf("copies removed after the releases: %v; want d.1's and d.2's", deleted)
	}
}
