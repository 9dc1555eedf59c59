package integration

import (
	"context"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/s3test"
	"github.com/stasis-run/stasis/testkit/testactor"
	"github.com/stasis-run/stasis/transfer"
)

// The two runsc builds scripts/install-runsc.sh installs: the default
// (September 2026) and the reference (May 2026, --reference).
const (
	defaultRunsc   = "/usr/local/bin/runsc"
	referenceRunsc = "/usr/local/lib/stasis/runsc-reference/bin/runsc"
)

// otherRunsc is the build that is not the runsc on PATH: a node running it
// cannot restore the other nodes' Full snapshots, which makes it a node
// that does not fit, on either pass of scripts/test.sh.
func otherRunsc(t *testing.T) string {
	onPath, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatal(err)
	}
	if resolved, err := filepath.EvalSymlinks(onPath); err == nil && resolved == referenceRunsc {
		return defaultRunsc
	}
	return referenceRunsc
}

// fleetEnv is a fleet on one machine: a real kube-apiserver and etcd, one
// S3 store (versitygw), and per node a stasisd with its own data folder,
// runsc root and node name, beside its stasis-kube agent; one controller.
type fleetEnv struct {
	t          *testing.T
	cp         *controlPlane
	store      string
	nodes      map[string]*fleetNode
	controller *kubeProc
	lease      string // --lease-duration of the controller and the agents
}

type fleetNode struct {
	name  string
	d     *daemon
	agent *kubeProc
}

const leaseFlag = "2s"

// newFleet is newFleetLease with the tests' short lease (leaseFlag), so that
// a lost node is seen in seconds.
func newFleet(t *testing.T) *fleetEnv {
	t.Helper()
	return newFleetLease(t, leaseFlag)
}

// newFleetLease starts the control plane, the store and the controller;
// the controller and every agent added run with lease duration lease.
func newFleetLease(t *testing.T, lease string) *fleetEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the fleet tests run real runsc sandboxes and need root")
	}
	f := &fleetEnv{t: t, cp: startControlPlane(t), nodes: map[string]*fleetNode{}, lease: lease}
	s3 := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	f.store = s3.Location("fleet")
	// The shared store is made once, as an operator would with `stasis
	// store init`; every stasisd and the controller open it.
	if _, err := location.Repository(context.Background(), f.store, true); err != nil {
		t.Fatal(err)
	}
	f.controller = newKubeProc(t, "controller", "controller", "--kubeconfig", f.cp.controllerConfig, "--store", f.store, "--lease-duration", lease)
	return f
}

// addNode starts a node: its Node object (as its kubelet would register
// it), its stasisd (extra flags added) and its agent.
func (f *fleetEnv) addNode(name string, extra ...string) *fleetNode {
	f.t.Helper()
	return f.addNodeVia(name, f.cp.agentConfig, extra...)
}

// addNodeVia is addNode with the agent reaching the API server through the
// kubeconfig agentConfig.
func (f *fleetEnv) addNodeVia(name, agentConfig string, extra ...string) *fleetNode {
	f.t.Helper()
	ctx := context.Background()
	if err := f.cp.kube.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		f.t.Fatal(err)
	}
	d := newDaemon(f.t, append([]string{"--repo", f.store}, extra...)...)
	d.start("")
	n := &fleetNode{name: name, d: d}
	// Every node of the tests is this machine, reached at its own address
	// (an EndpointSlice may not name a loopback one).
	n.agent = newKubeProc(f.t, "agent-"+name, "agent", "--kubeconfig", agentConfig, "--node", name, "--socket", d.socket, "--lease-duration", f.lease, "--node-address", hostAddress(f.t))
	waitForLong(f.t, "node "+name+" to publish its fingerprint and lease", time.Minute, func() bool {
		var node corev1.Node
		return f.cp.kube.Get(ctx, client.ObjectKey{Name: name}, &node) == nil && node.Annotations[fleet.FingerprintAnnotation] != "" &&
			node.Labels["stasis.dev/class"] != ""
	})
	f.nodes[name] = n
	return n
}

// hostAddress is an address of this machine other than loopback.
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("this machine has no IPv4 address but loopback (%v): the fleet's endpoints need one", addrs)
	return ""
}

func (f *fleetEnv) template(name string) {
	f.t.Helper()
	dir := testactor.Bundle(f.t, f.t.TempDir(), testactor.Options{})
	at := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: stasisv1alpha1.ActorTemplateSpec{Bundle: dir, Durable: []string{"/state"}, Probe: &stasisv1alpha1.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30}}}
	if err := f.cp.kube.Create(context.Background(), at); err != nil {
		f.t.Fatal(err)
	}
}

// createOn creates counter actor name bound to node (spec.node).
func (f *fleetEnv) createOn(name, node string) {
	f.t.Helper()
	a := &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: stasisv1alpha1.ActorSpec{Template: "counter", Node: node}}
	if err := f.cp.kube.Create(context.Background(), a); err != nil {
		f.t.Fatal(err)
	}
}

// startOn creates counter actor name on node, waits until it runs there,
// and frees it to move (spec.node cleared), still bound there.
func (f *fleetEnv) startOn(name, node string) {
	f.t.Helper()
	f.createOn(name, node)
	f.await(name, "running on "+node, func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == node })
	f.edit(name, func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
}

func (f *fleetEnv) actor(name string) *stasisv1alpha1.Actor {
	f.t.Helper()
	var a stasisv1alpha1.Actor
	if err := f.cp.kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &a); err != nil {
		f.t.Fatal(err)
	}
	return &a
}

// edit changes an Actor's spec, retrying on conflicts.
func (f *fleetEnv) edit(name string, fn func(*stasisv1alpha1.ActorSpec)) {
	f.t.Helper()
	for range 10 {
		a := f.actor(name)
		fn(&a.Spec)
		if err := f.cp.kube.Update(context.Background(), a); err == nil {
			return
		}
	}
	f.t.Fatalf("could not update actor %s", name)
}

// await waits until actor name's status satisfies cond.
func (f *fleetEnv) await(name, what string, cond func(stasisv1alpha1.ActorStatus) bool) stasisv1alpha1.ActorStatus {
	f.t.Helper()
	var last stasisv1alpha1.ActorStatus
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		last = f.actor(name).Status
		if cond(last) {
			return last
		}
	}
	f.t.Fatalf("actor %s: timed out waiting for %s; status %+v", name, what, last)
	return last
}

func running(s stasisv1alpha1.ActorStatus) bool {
	return s.Phase == stasisv1alpha1.PhaseRunning && s.Node != ""
}

// counter reads or bumps an actor's in-memory counter where it runs.
func (f *fleetEnv) counter(name, verb string) string {
	f.t.Helper()
	node := f.actor(name).Status.Node
	n := f.nodes[node]
	if n == nil {
		f.t.Fatalf("actor %s is on node %q, which this test does not run", name, node)
	}
	_, count, _ := strings.Cut(n.d.counter(name, verb), " ")
	return count
}

// TestFleet drives three nodes through a real kube-apiserver: placement,
// a move to another node, a node that does not fit, a drain with the
// controller killed in the middle, and a lost node that comes back.
func TestFleet(t *testing.T) {
	// When node-b is lost, node-a restores its seven actors at once. On
	// the 2-core build machine its stasisd then answered the agent's look
	// later than the tests' 2 s lease allows (a sixth of it), and the
	// agent fenced the node as it should for a stasisd that does not
	// answer. A 6 s lease gives it 1 s (the default 15 s gives 2.5 s).
	f := newFleetLease(t, "6s")
	ctx := context.Background()
	f.addNode("node-a")
	f.addNode("node-b")
	f.template("counter")

	// run -> placed on a fitting node, spread over the two.
	names := []string{"w1", "w2", "w3", "w4"}
	for _, n := range names {
		if err := f.cp.kube.Create(ctx, &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: n}, Spec: stasisv1alpha1.ActorSpec{Template: "counter"}}); err != nil {
			t.Fatal(err)
		}
	}
	perNode := map[string]int{}
	want := map[string]string{}
	for i, n := range names {
		s := f.await(n, "running", running)
		perNode[s.Node]++
		for range i + 1 {
			want[n] = f.counter(n, "incr")
		}
	}
	if perNode["node-a"] != 2 || perNode["node-b"] != 2 {
		t.Fatalf("four new actors on two nodes were not spread: %v", perNode)
	}

	// suspend -> resume on the other node, the counter kept.
	from := f.actor("w1").Status.Node
	to := map[string]string{"node-a": "node-b", "node-b": "node-a"}[from]
	f.edit("w1", func(s *stasisv1alpha1.ActorSpec) { s.Phase = stasisv1alpha1.PhaseSuspended })
	s := f.await("w1", "suspended to the store", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhaseSuspended && s.Node == "" && s.Snapshot != ""
	})
	var snaps stasisv1alpha1.SnapshotList
	if err := f.cp.kube.List(ctx, &snaps, client.InNamespace("default"), client.MatchingLabels{"stasis.dev/actor": "w1"}); err != nil || len(snaps.Items) != 1 ||
		snaps.Items[0].Spec.StoreName != s.Snapshot || snaps.Items[0].Spec.Node != from {
		t.Fatalf("the Snapshot of w1's suspend: %+v %v (status %+v)", snaps.Items, err, s)
	}
	f.edit("w1", func(s *stasisv1alpha1.ActorSpec) { s.Phase, s.Node = stasisv1alpha1.PhaseRunning, to })
	f.await("w1", "running on "+to, func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == to })
	if got := f.counter("w1", "get"); got != want["w1"] {
		t.Fatalf("w1's counter after moving from %s to %s: %s, want %s", from, to, got, want["w1"])
	}
	if _, err := f.nodes[from].d.api.InspectActor(ctx, "w1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("node %s still holds w1 after it left: %v", from, err)
	}
	f.edit("w1", func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })

	// A node whose fingerprint does not fit (another runsc build) is never
	// chosen, and the status says why.
	f.addNode("node-c", "--runsc", otherRunsc(t))
	f.edit("w2", func(s *stasisv1alpha1.ActorSpec) { s.Phase = stasisv1alpha1.PhaseSuspended })
	f.await("w2", "suspended", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhaseSuspended && s.Snapshot != ""
	})
	f.edit("w2", func(s *stasisv1alpha1.ActorSpec) { s.Phase, s.Node = stasisv1alpha1.PhaseRunning, "node-c" })
	s = f.await("w2", "a reason why node-c cannot take it", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhasePending && strings.Contains(s.Reason, "no node can restore") && strings.Contains(s.Reason, "node-c")
	})
	if s.Node != "" || !strings.Contains(s.Reason, "build") {
		t.Fatalf("w2 pinned to the node that does not fit: %+v", s)
	}
	f.edit("w2", func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
	s = f.await("w2", "running again", running)
	if s.Node == "node-c" {
		t.Fatal("w2 was placed on node-c, which cannot restore it")
	}
	if got := f.counter("w2", "get"); got != want["w2"] {
		t.Fatalf("w2's counter: %s, want %s", got, want["w2"])
	}

	// Golden snapshots fleet-wide: the template warmed once, on node-a,
	// into the store; a new actor starts from it on a node that can restore
	// it, never on node-c.
	tmpl, err := f.nodes["node-a"].d.api.WarmTemplate(ctx, api.WarmRequest{Template: "counter"})
	if err != nil || tmpl.Golden == "" {
		t.Fatalf("warm on node-a: %+v %v", tmpl, err)
	}
	goldenSnap, err := f.nodes["node-a"].d.api.InspectSnapshot(ctx, tmpl.Golden)
	if err != nil || goldenSnap.Stored == "" {
		t.Fatalf("the golden snapshot is not stored: %+v %v", goldenSnap, err)
	}
	golden := goldenSnap.Stored
	var at stasisv1alpha1.ActorTemplate
	if err := f.cp.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: "counter"}, &at); err != nil {
		t.Fatal(err)
	}
	at.Spec.Golden = golden
	if err := f.cp.kube.Update(ctx, &at); err != nil {
		t.Fatal(err)
	}
	// Pre-staged: node-b's agent has its stasisd copy the golden snapshot
	// before any actor starts from it there; node-c, which cannot restore
	// it, fetches nothing; node-a holds it already (it made it).
	waitForLong(t, "the golden snapshot staged on node-b", 2*time.Minute, func() bool {
		list, err := f.nodes["node-b"].d.api.ListStaged(ctx)
		return err == nil && len(list) == 1 && list[0].Name == golden
	})
	for _, n := range []string{"node-a", "node-c"} {
		if list, err := f.nodes[n].d.api.ListStaged(ctx); err != nil || len(list) != 0 {
			t.Fatalf("staged on %s: %+v %v; want none", n, list, err)
		}
	}
	for _, g := range []string{"g1", "g2", "g3"} {
		if err := f.cp.kube.Create(ctx, &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: g}, Spec: stasisv1alpha1.ActorSpec{Template: "counter"}}); err != nil {
			t.Fatal(err)
		}
		s := f.await(g, "running from the golden snapshot", running)
		if s.Node == "node-c" || !strings.Contains(s.Reason, golden) || s.Snapshot != golden {
			t.Fatalf("%s of the warmed template: %+v, want it on node-a or node-b from %s", g, s, golden)
		}
		// Wherever it landed, it read no store: node-a's own golden
		// folder, node-b's staged copy.
		events, err := f.nodes[s.Node].d.api.Events(ctx, g, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Events {
			if e.Step == transfer.StepPull {
				t.Fatalf("%s on %s pulled the golden snapshot: %+v", g, s.Node, e)
			}
		}
		want[g] = f.counter(g, "incr")
	}

	// Drain node-a, with the controller killed while it drains: every
	// actor goes on counting on node-b (node-c does not fit).
	onA := f.boundTo("node-a")
	if len(onA) == 0 {
		t.Fatal("no actor on node-a to drain")
	}
	f.drain("node-a", true)
	f.await(onA[0], "the drain to start", func(s stasisv1alpha1.ActorStatus) bool { return s.Evict || s.Node != "node-a" })
	f.controller.kill()
	f.controller.start()
	for _, n := range onA {
		s := f.await(n, "running off node-a", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node != "node-a" })
		if s.Node != "node-b" {
			t.Fatalf("%s drained to %s, want node-b (node-c does not fit)", n, s.Node)
		}
	}
	for _, n := range names {
		if got := f.counter(n, "get"); got != want[n] {
			t.Fatalf("%s's counter after the drain: %s, want %s", n, got, want[n])
		}
	}
	if list, _ := f.nodes["node-a"].d.api.ListActors(ctx); len(list) != 0 {
		t.Fatalf("drained node-a still holds %+v", list)
	}

	// node-b lost: its agent killed, its lease runs out; its actors resume
	// on node-a (open again) from their last stored snapshot, and node-b,
	// once its agent is back, removes its copies without running them.
	f.drain("node-a", false)
	onB := f.boundTo("node-b")
	stored := map[string]bool{}
	for _, n := range onB {
		snap := f.actor(n).Status.Snapshot
		stored[n] = snap != "" && snap != golden
	}
	f.nodes["node-b"].agent.kill()
	for _, n := range onB {
		if !stored[n] {
			// Never stored: it starts afresh from its template (now from
			// its golden snapshot), anywhere it fits.
			s := f.await(n, "running off node-b", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node != "node-b" })
			if s.Snapshot != "" && s.Snapshot != golden {
				t.Fatalf("%s, never stored, came back with snapshot %s", n, s.Snapshot)
			}
			continue
		}
		f.await(n, "running on node-a after node-b was lost", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == "node-a" })
		if got := f.counter(n, "get"); got != want[n] {
			t.Fatalf("%s's counter after node-b was lost: %s, want %s (its last stored snapshot)", n, got, want[n])
		}
	}
	if !slices.Contains(slices.Collect(maps.Values(stored)), true) {
		t.Fatalf("no actor on node-b had a stored snapshot to resume from: %v", stored)
	}
	f.nodes["node-b"].agent.start()
	waitForLong(t, "node-b to remove its copies", time.Minute, func() bool {
		list, err := f.nodes["node-b"].d.api.ListActors(ctx)
		return err == nil && len(list) == 0
	})
	for _, n := range onB {
		f.nodes["node-b"].d.requireNoSandbox(n)
		if s := f.actor(n).Status; s.Node == "node-b" || !running(s) {
			t.Fatalf("%s after node-b came back: %+v", n, s)
		}
	}
	if !f.nodes["node-b"].agent.logHas("removing this node's copy without running it") {
		t.Error("node-b's agent did not say it fenced its copies")
	}
}

func (f *fleetEnv) boundTo(node string) []string {
	f.t.Helper()
	var list stasisv1alpha1.ActorList
	if err := f.cp.kube.List(context.Background(), &list, client.InNamespace("default")); err != nil {
		f.t.Fatal(err)
	}
	var names []string
	for _, a := range list.Items {
		if a.Status.Node == node {
			names = append(names, a.Name)
		}
	}
	return names
}

func (f *fleetEnv) drain(node string, on bool) {
	f.t.Helper()
	verb := "drain"
	if !on {
		verb = "undrain"
	}
	out, err := exec.Command(stasisKube.path(f.t), verb, node, "--kubeconfig", f.cp.kubeconfig).CombinedOutput()
	if err != nil {
		f.t.Fatalf("stasis-kube %s %s: %v\n%s", verb, node, err, out)
	}
}
