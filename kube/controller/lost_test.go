package controller

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/stasis-run/stasis/fingerprint"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// newRepo is a repository in a folder of the test's, and the folder.
func newRepo(t *testing.T) (*store.Repository, string) {
	t.Helper()
	dir := t.TempDir()
	be, err := local.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := store.Init(context.Background(), be)
	if err != nil {
		t.Fatal(err)
	}
	return repo, dir
}

// storeSnapshot stores a one-file snapshot of actor under name, made at
// createdAt.
func storeSnapshot(t *testing.T, repo *store.Repository, name, actor string, createdAt time.Time) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte(name), 0o600); err != nil {
		t.Fatal(err)
	}
	m := snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: actor, CreatedAt: createdAt, Runtime: snapshot.Runtime{Name: "gvisor", Version: "v1"}}
	if _, err := snapshot.Commit(ctx, dir, m); err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, repo, name, dir, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
}

// renewedA is when node-a's agent last renewed its Lease, to the
// microsecond a Lease keeps.
var renewedA = time.Now().Add(-time.Hour).Truncate(time.Microsecond)

// fleetOf is a fake API server holding node-a, whose lease was last
// renewed at renewedA, node-b, renewed now, both with one fingerprint, the
// template t, and actors.
func fleetOf(t *testing.T, actors ...*stasisv1alpha1.Actor) client.Client {
	t.Helper()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	fp, err := fleet.FingerprintJSON(fingerprint.Fingerprint{FormatVersion: fingerprint.FormatVersion, Hostname: "h", Arch: "amd64", Kernel: "6.18",
		Memory: fingerprint.Memory{Total: 1 << 30, Available: 1 << 30}, Runtime: runtime.Info{Name: "gvisor", Version: "v1"}})
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{&stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "t"}}}
	for node, renewed := range map[string]time.Time{"node-a": renewedA, "node-b": time.Now()} {
		secs := int32(15)
		objs = append(objs,
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{fleet.FingerprintAnnotation: fp}}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.DefaultLeaseNamespace, Name: fleet.LeaseOf(node)},
				Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewed}, LeaseDurationSeconds: &secs}})
	}
	for _, a := range actors {
		objs = append(objs, a)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&stasisv1alpha1.Actor{}).Build()
}

// controllerOf is a controller of kube's fleet that saw node-a's last
// renewal when it was made: node-a is lost.
func controllerOf(kube client.Client, repo *store.Repository) *Controller {
	c := &Controller{Kube: kube, Repo: repo, Namespace: "default", LeaseNamespace: fleet.DefaultLeaseNamespace, Log: slog.New(slog.DiscardHandler)}
	c.leases.Renewed(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: fleet.DefaultLeaseNamespace, Name: fleet.LeaseOf("node-a")},
		Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: renewedA}}}, renewedA)
	return c
}

// TestLostNodeResumesFromTheNewestStoredSnapshot: an actor whose node was
// lost resumes from the newest snapshot it pushed, whatever its status
// recorded (its agent hung between stasisd's suspend and its record of
// it), never from an older one or its template; not from a snapshot of
// another actor whose id it begins (s1.x), nor of an Actor of the same name
// deleted before it was made; and while the store cannot be read, it is
// started nowhere, the reason saying why.
func TestLostNodeResumesFromTheNewestStoredSnapshot(t *testing.T) {
	ctx := context.Background()
	repo, repoDir := newRepo(t)
	made := time.Now().Add(-time.Hour).Truncate(time.Second)
	storeSnapshot(t, repo, "s1.snap-000000000000", "s1", made.Add(-time.Minute)) // the Actor of the same name before
	storeSnapshot(t, repo, "s1.snap-000000000001", "s1", made.Add(time.Minute))
	storeSnapshot(t, repo, "s1.snap-000000000002", "s1", made.Add(2*time.Minute))
	storeSnapshot(t, repo, "s1.x.snap-000000000003", "s1.x", made.Add(3*time.Minute))
	storeSnapshot(t, repo, "golden.t.golden-t-000000000004", "warm_t", made.Add(4*time.Minute))

	recorded := []string{"", "s1.snap-000000000001", "s1.snap-000000000002", "golden.t.golden-t-000000000004"}
	var actors []*stasisv1alpha1.Actor
	for i, snap := range recorded {
		actors = append(actors, &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", CreationTimestamp: metav1.NewTime(made)},
			Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a", Evict: i%2 == 0, Placement: 1, Snapshot: snap}})
	}
	never := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s2", CreationTimestamp: metav1.NewTime(made)},
		Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a", Placement: 1}}
	for _, a := range actors {
		kube := fleetOf(t, a, never)
		c := controllerOf(kube, repo)
		for range 2 { // unbound from the lost node, then placed
			if err := c.Pass(ctx); err != nil {
				t.Fatal(err)
			}
		}
		var got stasisv1alpha1.Actor
		if err := kube.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
			t.Fatal(err)
		}
		s := got.Status
		if s.Node != "node-b" || s.Placement != 3 || s.Snapshot != "s1.snap-000000000002" || !strings.Contains(s.Reason, "s1.snap-000000000002") {
			t.Errorf("status recorded %q: after node-a was lost %+v; want it on node-b, resuming from s1.snap-000000000002", a.Status.Snapshot, s)
		}
		// Never stored: from its template, as before.
		if err := kube.Get(ctx, client.ObjectKeyFromObject(never), &got); err != nil {
			t.Fatal(err)
		}
		if s := got.Status; s.Node != "node-b" || s.Snapshot != "" {
			t.Errorf("an actor never stored, after node-a was lost: %+v; want it on node-b from its template", s)
		}
	}

	// Waiting for a node that is not there, an actor keeps the snapshot
	// its status names.
	waiting := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", CreationTimestamp: metav1.NewTime(made)},
		Spec: stasisv1alpha1.ActorSpec{Template: "t", Node: "node-c"}, Status: stasisv1alpha1.ActorStatus{Placement: 1, Snapshot: "s1.snap-000000000002"}}
	kube := fleetOf(t, waiting)
	c := controllerOf(kube, repo)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var got stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKeyFromObject(waiting), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status; s.Node != "" || s.Snapshot != "s1.snap-000000000002" || !strings.Contains(s.Reason, "node-c") {
		t.Fatalf("waiting for node-c: %+v; want it unbound, its snapshot kept", s)
	}

	// The store unreadable: unbound from the lost node, it is started
	// nowhere, and says why.
	if err := os.RemoveAll(filepath.Join(repoDir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repoDir, "snapshots"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := actors[0]
	kube = fleetOf(t, a)
	c = controllerOf(kube, repo)
	for range 2 {
		if err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status; s.Node != "" || s.Phase != stasisv1alpha1.PhasePending || !strings.Contains(s.Reason, "store") || !strings.Contains(s.Reason, "not started anywhere") {
		t.Fatalf("store unreadable: %+v; want it bound nowhere, the reason naming the store", s)
	}
}

// TestOutOfServiceMovesActorsAtOnce: an operator's out-of-service taint on
// a node whose Lease is fresh moves its actors at once, to resume from
// their newest stored snapshot elsewhere, and nothing is placed there.
func TestOutOfServiceMovesActorsAtOnce(t *testing.T) {
	ctx := context.Background()
	repo, _ := newRepo(t)
	made := time.Now().Add(-time.Hour).Truncate(time.Second)
	storeSnapshot(t, repo, "s1.snap-000000000001", "s1", made.Add(time.Minute))
	a := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", CreationTimestamp: metav1.NewTime(made)},
		Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-b", Placement: 1}}
	kube := fleetOf(t, a)
	var b corev1.Node
	if err := kube.Get(ctx, client.ObjectKey{Name: "node-b"}, &b); err != nil {
		t.Fatal(err)
	}
	b.Spec.Taints = append(b.Spec.Taints, corev1.Taint{Key: fleet.OutOfServiceTaint, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	if err := kube.Update(ctx, &b); err != nil {
		t.Fatal(err)
	}
	// node-a is seen for the first time: its Lease counts from now.
	c := &Controller{Kube: kube, Repo: repo, Namespace: "default", LeaseNamespace: fleet.DefaultLeaseNamespace, Log: slog.New(slog.DiscardHandler)}
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var got stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status; s.Node != "" || !strings.Contains(s.Reason, "out of service") {
		t.Fatalf("after node-b was tainted out of service: %+v; want it unbound, saying why", s)
	}
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if s := got.Status; s.Node != "node-a" || s.Snapshot != "s1.snap-000000000001" {
		t.Fatalf("placed after node-b was tainted: %+v; want it on node-a from s1.snap-000000000001", s)
	}
}

// TestLostOnlyIfRevokedBeforeTheNodeRenews: the controller moves a lost
// node's actors only after raising the node's epoch with a write
// conditional on the Lease it found expired. When the node renews between
// the controller's read and that write (a partition that heals just as the
// node is counted lost), the write fails, the node is alive and its actors
// stay; when it does not, the epoch is raised and a binding of the older
// epoch is moved even from a node that renewed since.
func TestLostOnlyIfRevokedBeforeTheNodeRenews(t *testing.T) {
	ctx := context.Background()
	repo, _ := newRepo(t)
	made := time.Now().Add(-time.Hour).Truncate(time.Second)
	a := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s1", CreationTimestamp: metav1.NewTime(made)},
		Spec: stasisv1alpha1.ActorSpec{Template: "t"}, Status: stasisv1alpha1.ActorStatus{Node: "node-a", Placement: 1}}
	base := fleetOf(t, a)
	leaseKey := client.ObjectKey{Namespace: fleet.DefaultLeaseNamespace, Name: fleet.LeaseOf("node-a")}
	renewA := func(c client.Client) {
		var l coordinationv1.Lease
		if err := c.Get(ctx, leaseKey, &l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		if err := c.Update(ctx, &l); err != nil {
			t.Fatal(err)
		}
	}
	// node-a's agent renews just before the controller's revocation lands.
	healed := false
	kube := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Name == leaseKey.Name && !healed {
				healed = true
				renewA(c)
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	c := controllerOf(kube, repo)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var got stasisv1alpha1.Actor
	if err := kube.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := kube.Get(ctx, leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	if !healed || got.Status.Node != "node-a" || fleet.Epoch(&lease) != 0 {
		t.Fatalf("node-a renewed as it was counted lost: actor %+v, epoch %d; want it kept on node-a, the epoch unraised", got.Status, fleet.Epoch(&lease))
	}

	// Not renewed: revoked, the epoch raised, the actor moved.
	base = fleetOf(t, a)
	c = controllerOf(base, repo)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, leaseKey, &lease); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if fleet.Epoch(&lease) != 1 || got.Status.Node != "" {
		t.Fatalf("node-a lost: actor %+v, epoch %d; want it unbound, the epoch 1", got.Status, fleet.Epoch(&lease))
	}
	// Bound to node-a again in epoch 0 (a binding read before), on a
	// node-a that renewed since: moved all the same.
	got.Status.Node, got.Status.NodeEpoch = "node-a", 0
	if err := base.Status().Update(ctx, &got); err != nil {
		t.Fatal(err)
	}
	renewA(base)
	c = controllerOf(base, repo)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := base.Get(ctx, client.ObjectKeyFromObject(a), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Node == "node-a" && got.Status.NodeEpoch == 0 || !strings.Contains(got.Status.Reason, "revoked") {
		t.Fatalf("a binding of epoch 0 to node-a in epoch 1: %+v; want it moved, saying why", got.Status)
	}
}
