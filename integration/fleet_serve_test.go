package integration

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestFleetServe: an actor of a template that publishes a port and
// suspends idle actors, in the fleet on a real kube-apiserver. Its
// EndpointSlice (there is no kube-proxy here: the test dials what the
// slice names) names its node and the port that node picked; the actor
// answers there, is suspended when idle and stays bound, ready, its next
// connection waking it with its counter kept; drained, it answers at its
// new node's port, which the slice then names.
func TestFleetServe(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b"} {
		f.addNode(n, "--network", "sandbox")
	}
	at := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: stasisv1alpha1.ActorTemplateSpec{Bundle: testactor.Bundle(t, t.TempDir(), testactor.Options{Listen: ":8000"}),
			Probe:   &stasisv1alpha1.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30},
			Network: "cni", Ports: []stasisv1alpha1.Port{{ContainerPort: 8000}}, Idle: &stasisv1alpha1.Idle{After: "3s", Then: "suspend"}}}
	if err := f.cp.kube.Create(ctx, at); err != nil {
		t.Fatal(err)
	}
	// A dot: its Service gets a name made of its own.
	const name = "web.1"
	if err := f.cp.kube.Create(ctx, &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: stasisv1alpha1.ActorSpec{Template: "web"}}); err != nil {
		t.Fatal(err)
	}
	service := fleet.ServiceName(name)
	// slice waits until the actor's EndpointSlice names one ready
	// endpoint that cond accepts, and returns the address it names.
	slice := func(what string, cond func(node string, port int32) bool) (node, addr string) {
		t.Helper()
		var last discoveryv1.EndpointSlice
		waitForLong(t, "the EndpointSlice to name "+what, 2*time.Minute, func() bool {
			if err := f.cp.kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: service}, &last); err != nil {
				return false
			}
			if len(last.Endpoints) != 1 || len(last.Ports) != 1 || last.Endpoints[0].NodeName == nil || !*last.Endpoints[0].Conditions.Ready {
				return false
			}
			node = *last.Endpoints[0].NodeName
			addr = net.JoinHostPort(last.Endpoints[0].Addresses[0], strconv.Itoa(int(*last.Ports[0].Port)))
			return cond(node, *last.Ports[0].Port)
		})
		if last.Labels[discoveryv1.LabelServiceName] != service || *last.Ports[0].Name != "tcp-8000" {
			t.Fatalf("EndpointSlice %s: labels %v, port %s", service, last.Labels, *last.Ports[0].Name)
		}
		return node, addr
	}

	st := f.await(name, "running with its endpoint", func(s stasisv1alpha1.ActorStatus) bool {
		return running(s) && s.Endpoint != nil && len(s.Endpoint.Ports) == 1 && s.Endpoint.Service == service
	})
	first, addr := slice("its node", func(node string, port int32) bool {
		return node == st.Node && port == st.Endpoint.Ports[0].Port
	})
	process, n := mustAsk(t, addr, "incr")
	if n != 1 {
		t.Fatalf("first count through %s: %d", addr, n)
	}

	// Idle: suspended on its node, still bound there and ready.
	st = f.await(name, "suspended by its idle policy", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhaseSuspended && s.Idle && s.Node == first
	})
	if _, again := slice("its node while it idles", func(node string, _ int32) bool { return node == first }); again != addr {
		t.Fatalf("idle: the slice names %s, before %s", again, addr)
	}
	if p, n := mustAsk(t, addr, "incr"); p != process || n != 2 {
		t.Fatalf("woken by a connection: process %s count %d; want %s counting 2", p, n, process)
	}
	f.await(name, "running again after its wake", func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == first })

	// Drained: it answers at the port its new node picked.
	f.drain(first, true)
	st = f.await(name, "moved off "+first, func(s stasisv1alpha1.ActorStatus) bool {
		return s.Node != "" && s.Node != first && s.Endpoint != nil && s.Endpoint.Address != "" && (s.Phase == stasisv1alpha1.PhaseRunning || s.Idle)
	})
	moved, addr2 := slice("its new node", func(node string, port int32) bool {
		return node == st.Node && port == st.Endpoint.Ports[0].Port
	})
	if _, n := mustAsk(t, addr2, "incr"); n != 3 {
		t.Fatalf("after the drain to %s, through %s: count %d, want 3", moved, addr2, n)
	}
	if _, err := ask(addr, "get"); err == nil && addr != addr2 {
		t.Fatalf("the drained node still answers for the actor at %s", addr)
	}
}
