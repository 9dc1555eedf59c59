package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFleetRefusalsInTheStatus: what the fleet cannot do is said in the
// Actor's status, never only in a log, and a refusal is not retried in a
// hot loop:
//   - an Actor naming a template that does not exist waits Pending with
//     the reason, and runs once the template is created;
//   - a template name no object can have, and a negative placement, are
//     refused by the API server;
//   - an actor its node cannot start for good (its template's bundle is
//     not there) is Failed with the reason, and not started again until
//     its spec changes.
func TestFleetRefusalsInTheStatus(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	n := f.addNode("node-a")

	actor := func(name, template string) *stasisv1alpha1.Actor {
		return &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: stasisv1alpha1.ActorSpec{Template: template}}
	}
	if err := f.cp.kube.Create(ctx, actor("r1", "later")); err != nil {
		t.Fatal(err)
	}
	f.await("r1", "a reason naming the missing template", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhasePending && strings.Contains(s.Reason, "ActorTemplate later does not exist")
	})
	f.template("later")
	f.await("r1", "running once its template exists", running)

	if err := f.cp.kube.Create(ctx, actor("r2", strings.Repeat("t", 6000))); !apierrors.IsInvalid(err) {
		t.Fatalf("an Actor naming a 6000-character template: %v; want it refused as invalid", err)
	}
	if err := f.cp.kube.Create(ctx, actor("r3", "Not_A_Name")); !apierrors.IsInvalid(err) {
		t.Fatalf("an Actor naming a template no object can have: %v; want it refused as invalid", err)
	}
	a := f.actor("r1")
	a.Status.Placement = -5
	if err := f.cp.kube.Status().Update(ctx, a); !apierrors.IsInvalid(err) {
		t.Fatalf("a status with placement -5: %v; want it refused as invalid", err)
	}

	// A template whose bundle no node has: stasisd refuses the run, for
	// good until the spec changes.
	bad := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nowhere"},
		Spec: stasisv1alpha1.ActorTemplateSpec{Bundle: "/nonexistent/bundle"}}
	if err := f.cp.kube.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if err := f.cp.kube.Create(ctx, actor("r4", "nowhere")); err != nil {
		t.Fatal(err)
	}
	s := f.await("r4", "Failed with the reason", func(s stasisv1alpha1.ActorStatus) bool { return s.Phase == stasisv1alpha1.PhaseFailed })
	if !strings.Contains(s.Reason, "change the Actor's spec to try again") {
		t.Fatalf("r4's status: %+v", s)
	}
	attempts := func() int { return strings.Count(n.agent.logText(), "msg=starting actor=r4 ") }
	before := attempts()
	if before == 0 {
		t.Fatal("the agent's log does not show r4's start")
	}
	// Five agent passes (one a second): none may try r4 again.
	time.Sleep(5 * time.Second)
	if after := attempts(); after != before {
		t.Fatalf("the agent started r4 %d more times after it failed for good", after-before)
	}
}

// TestAgentRefusesCRDsOfAnOlderRelease: an agent whose cluster holds an
// Actor CRD that does not let .status.node be selected (the CRDs of an
// older release, or a cluster before custom resource field selectors)
// refuses to start, saying what and what to apply, rather than retrying a
// watch in its log.
func TestAgentRefusesCRDsOfAnOlderRelease(t *testing.T) {
	cp := startControlPlane(t)
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := cp.kube.Get(ctx, client.ObjectKey{Name: "actors.stasis.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		delete(v.(map[string]any), "selectableFields")
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if err := cp.kube.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var err error
	// The API server takes the CRD's change in a moment: until then the
	// agent starts (and, with no stasisd here, fails on that instead).
	waitForLong(t, "the agent to refuse the Actor CRD", time.Minute, func() bool {
		cmd := exec.Command(stasisKube.path(t), "agent", "--kubeconfig", cp.agentConfig, "--node", "node-a", "--socket", filepath.Join(t.TempDir(), "none.sock"))
		out, err = cmd.CombinedOutput()
		return err != nil && strings.Contains(string(out), "status.node")
	})
	if !strings.Contains(string(out), "watch Actors") || !strings.Contains(string(out), "deploy/helm/stasis") {
		t.Fatalf("the agent's refusal: %v\n%s; want it to name the watch of Actors and the CRDs to apply", err, out)
	}
}
