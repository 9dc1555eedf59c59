package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// TestPassReadsTheWatchAndUnwatchedCopiesDirectly: a pass lists the actors
// from the watch of this node's actors, which holds none bound elsewhere;
// a copy here of an actor the watch does not hold is removed only once
// its Actor, read from the API server, is deleted or bound elsewhere (the
// snapshot stasisd stored for it recorded first), and kept when the API
// server says it is bound here (the watch has not caught up). At rest a
// pass asks the API server nothing.
func TestPassReadsTheWatchAndUnwatchedCopiesDirectly(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	actor := func(name, node string) *stasisv1alpha1.Actor {
		return &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: node}}
	}
	served, moved, fresh := actor("served.1", "node-a"), actor("moved.1", "node-b"), actor("fresh", "node-a")
	var requests atomic.Int32
	count := interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			requests.Add(1)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			requests.Add(1)
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			requests.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			requests.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(served.DeepCopy(), moved, fresh).
		WithStatusSubresource(&stasisv1alpha1.Actor{}).WithInterceptorFuncs(count).Build()
	// The watch holds this node's actors as it last heard of them: not
	// fresh, bound here a moment ago.
	watch := fake.NewClientBuilder().WithScheme(scheme).WithObjects(served).Build()
	stored := &stasisv1.Snapshot{Id: "snap-1", Actor: "moved.1", Stored: "moved.1.snap-000000000001", SizeBytes: 7}
	stasisd := &fakeStasisd{actors: []*stasisv1.Actor{
		{Id: "served.1", Template: "t", State: "RUNNING"},
		{Id: "moved.1", Template: "t", State: "SUSPENDED", Snapshot: stored},
		{Id: "gone", Template: "t", State: "RUNNING"},
		{Id: "fresh", Template: "t", State: "RUNNING"},
		{Id: "warm_t", Template: "t", State: "RUNNING"}, // not a fleet actor's
	}}
	a := &Agent{Kube: kube, Watched: watch, Stasisd: startFakeStasisd(t, stasisd), Node: "node-a", Namespace: "default",
		Workers: 2, Log: slog.New(slog.DiscardHandler)}
	if err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	deleted := stasisd.deletes()
	slices.Sort(deleted)
	if !slices.Equal(deleted, []string{"gone", "moved.1"}) {
		t.Fatalf("copies removed: %v; want gone's (its Actor deleted) and moved.1's (bound to node-b), not fresh's (bound here, not yet in the watch)", deleted)
	}
	var snaps stasisv1alpha1.SnapshotList
	if err := kube.List(ctx, &snaps, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	if len(snaps.Items) != 1 || snaps.Items[0].Spec.StoreName != stored.Stored || snaps.Items[0].Spec.Actor != "moved.1" {
		t.Fatalf("Snapshots: %+v; want moved.1's stored suspend recorded before its copy went", snaps.Items)
	}
	// The watch hears of the status the pass wrote, and of nothing else:
	// the next passes, at rest, ask the API server nothing.
	var now stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKeyFromObject(served), &now); err != nil {
		t.Fatal(err)
	}
	if now.Status.Phase != stasisv1alpha1.PhaseRunning {
		t.Fatalf("served.1's status: %+v; want Running", now.Status)
	}
	now.ResourceVersion = ""
	if err := watch.Delete(ctx, served); err != nil {
		t.Fatal(err)
	}
	if err := watch.Create(ctx, &now); err != nil {
		t.Fatal(err)
	}
	stasisd.actors = stasisd.actors[:1]
	for range 3 {
		requests.Store(0)
		if err := a.pass(ctx, true); err != nil {
			t.Fatal(err)
		}
		if n := requests.Load(); n != 0 {
			t.Fatalf("a pass at rest made %d requests of the API server; want none", n)
		}
	}
}

// TestFailedStartIsTriedAgain: a start here that failed for a reason that
// may pass (a probe that timed out on a loaded node) left its copy
// CRASHED; once its retry is due the copy is removed and the start tried
// again, not reported Failed for ever. A copy whose retry is not due yet is
// left as it is, and so is one that crashed after it ran (no failed start
// in its status): its restart policy or its spec decides. The failures are
// read from the status, as an agent that restarted finds them.
func TestFailedStartIsTriedAgain(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	actor := func(name string, retryAt time.Time) *stasisv1alpha1.Actor {
		a := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a", Phase: stasisv1alpha1.PhaseFailed}}
		if !retryAt.IsZero() {
			a.Status.StartFailures, a.Status.RetryAt = 1, &metav1.Time{Time: retryAt}
		}
		return a
	}
	due, later, ran := actor("due", time.Now().Add(-time.Second)), actor("later", time.Now().Add(time.Hour)), actor("ran", time.Time{})
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(due, later, ran).WithStatusSubresource(&stasisv1alpha1.Actor{}).Build()
	stasisd := &fakeStasisd{actors: []*stasisv1.Actor{
		{Id: "due", Template: "t", State: "CRASHED", Reason: "the actor did not start: probe: not ready within 30s"},
		{Id: "later", Template: "t", State: "CRASHED", Reason: "the actor did not start: probe: not ready within 30s"},
		{Id: "ran", Template: "t", State: "CRASHED", Reason: "its process was killed by signal 9"},
	}}
	a := &Agent{Kube: kube, Stasisd: startFakeStasisd(t, stasisd), Node: "node-a", Namespace: "default",
		Workers: 2, Log: slog.New(slog.DiscardHandler)}
	if err := a.pass(ctx, true); err != nil {
		t.Fatal(err)
	}
	if deleted := stasisd.deletes(); !slices.Equal(deleted, []string{"due"}) {
		t.Fatalf("copies removed: %v; want only due's, whose retry is due", deleted)
	}
	// The start was tried again (and failed here on the missing
	// ActorTemplate): a second failure, the next retry later.
	status := func(name string) stasisv1alpha1.ActorStatus {
		var got stasisv1alpha1.Actor
		if err := kube.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, &got); err != nil {
			t.Fatal(err)
		}
		return got.Status
	}
	if s := status("due"); s.StartFailures != 2 || s.RetryAt == nil || !s.RetryAt.After(time.Now()) || !strings.Contains(s.Reason, "tried again in 4s (failure 2)") {
		t.Fatalf("due's status after the pass: %+v; want a second failed start, tried again in 4 s", s)
	}
	if s := status("later"); s.StartFailures != 1 {
		t.Fatalf("later's status: %+v; want it untouched", s)
	}
	if s := status("ran"); s.StartFailures != 0 || s.Phase != stasisv1alpha1.PhaseFailed {
		t.Fatalf("ran's status: %+v; want it Failed, no start failure", s)
	}
}
