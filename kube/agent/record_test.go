package agent

import (
	"context"
	"log/slog"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// TestFinishedSuspendRecordedBeforeTheCopyGoes: a suspend that stasisd
// finished and stored while the agent could not record it is recorded as
// a Snapshot of the Actor when the agent finds the copy, once, whether or
// not the controller has already put it in the Actor's status; a copy
// that is not suspended, or whose push failed, records nothing.
func TestFinishedSuspendRecordedBeforeTheCopyGoes(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	actor := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1.x", UID: "uid-1"},
		Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-b", Snapshot: "s1.x.snap-000000000001"}}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(actor).Build()
	a := &Agent{Kube: kube, Node: "node-a", Namespace: "default", Log: slog.New(slog.DiscardHandler)}
	snap := func(stored string) *api.Snapshot { return &api.Snapshot{ID: "snap-1", Stored: stored, SizeBytes: 42} }
	for _, local := range []api.Actor{
		{ID: "s1.x", State: api.Running, Snapshot: snap("golden.t.golden-t-1")},
		{ID: "s1.x", State: api.Suspended, Snapshot: snap("")},
		{ID: "s1.x", State: api.Suspended, Snapshot: snap("s1.x.snap-000000000002")},
		{ID: "s1.x", State: api.Suspended, Snapshot: snap("s1.x.snap-000000000002")},
		{ID: "s1.x", State: api.Suspended, Snapshot: snap("s1.x.snap-000000000001")},
	} {
		if err := a.recordFinished(ctx, actor, local); err != nil {
			t.Fatalf("%+v: %v", local, err)
		}
	}
	var list stasisv1alpha1.SnapshotList
	if err := kube.List(ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	got := map[string]stasisv1alpha1.Snapshot{}
	for _, s := range list.Items {
		got[s.Spec.StoreName] = s
	}
	if len(list.Items) != 2 || got["s1.x.snap-000000000001"].Spec.Actor != "s1.x" || got["s1.x.snap-000000000002"].Spec.Node != "node-a" ||
		len(got["s1.x.snap-000000000002"].OwnerReferences) != 1 || got["s1.x.snap-000000000002"].OwnerReferences[0].UID != "uid-1" {
		t.Fatalf("Snapshots recorded: %+v; want s1.x's two stored suspends, owned by the Actor", list.Items)
	}
}

// TestServingAtRestAsksTheAPIServerNothing: an actor that is as its spec
// asks costs a pass no request of its own (the pass lists the actors
// once), nor does one that failed here and waits for a new spec: the
// agent's requests at rest do not grow with its actors.
func TestServingAtRestAsksTheAPIServerNothing(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	running := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "r1"}, Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a"}}
	failed := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "f1"}, Spec: stasisv1alpha1.ActorSpec{Template: "t"},
		Status: stasisv1alpha1.ActorStatus{Node: "node-a", Phase: stasisv1alpha1.PhaseFailed, StartFailures: 1}}
	calls := 0
	count := interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			calls++
			return c.Get(ctx, key, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			calls++
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(running, failed).WithStatusSubresource(&stasisv1alpha1.Actor{}).WithInterceptorFuncs(count).Build()
	a := &Agent{Kube: kube, Node: "node-a", Namespace: "default", Log: slog.New(slog.DiscardHandler)}
	local := api.Actor{ID: "r1", State: api.Running}
	// The first pass writes the status; every one after asks nothing.
	if err := a.serve(ctx, running, &local); err != nil || calls != 1 {
		t.Fatalf("first pass: %v, %d requests; want the one status write", err, calls)
	}
	for range 3 {
		var listed stasisv1alpha1.ActorList
		if err := kube.List(ctx, &listed, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		calls = 0
		for i := range listed.Items {
			var l *api.Actor
			if listed.Items[i].Name == "r1" {
				l = &local
			}
			if err := a.serve(ctx, &listed.Items[i], l); err != nil {
				t.Fatal(err)
			}
		}
		if calls != 0 {
			t.Fatalf("a pass at rest made %d requests of its own; want none", calls)
		}
	}
}

// TestBoundHereInTheNodesEpochOnly: a binding to this node counts only in
// the node's current epoch, as the agent's last renewal read it: one made
// before the controller counted the node lost (and raised its epoch) is
// neither run nor thawed.
func TestBoundHereInTheNodesEpochOnly(t *testing.T) {
	a := &Agent{Node: "node-a", epoch: 1}
	for _, c := range []struct {
		node  string
		epoch int64
		want  bool
	}{{"node-a", 1, true}, {"node-a", 0, false}, {"node-a", 2, false}, {"node-b", 1, false}} {
		actor := &stasisv1alpha1.Actor{Status: stasisv1alpha1.ActorStatus{Node: c.node, NodeEpoch: c.epoch}}
		if got := a.boundHere(actor); got != c.want {
			t.Errorf("bound to %s in epoch %d, the node in epoch 1: bound here %v, want %v", c.node, c.epoch, got, c.want)
		}
	}
}
