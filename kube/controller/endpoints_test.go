package controller

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// TestEndpointsFollowTheActor: a serving actor's Service and EndpointSlice
// are made when it is, name its node and published port once its agent
// wrote them, stay ready while it idles (the connection wakes it), follow
// it to another node, are emptied while it is bound to none, and go with
// it; a Service of another actor under the same name is left alone.
func TestEndpointsFollowTheActor(t *testing.T) {
	ctx := context.Background()
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	tpl := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: stasisv1alpha1.ActorTemplateSpec{Bundle: "/b", Ports: []stasisv1alpha1.Port{{ContainerPort: 8000}, {Name: "metrics", ContainerPort: 9090}}}}
	plain := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plain"}, Spec: stasisv1alpha1.ActorTemplateSpec{Bundle: "/b"}}
	actor := stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "w.1", UID: "uid-1"}, Spec: stasisv1alpha1.ActorSpec{Template: "web"}}
	other := stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p1", UID: "uid-2"}, Spec: stasisv1alpha1.ActorSpec{Template: "plain"}}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tpl, plain).Build()
	c := &Controller{Kube: kube, Namespace: "default", Log: slog.New(slog.DiscardHandler)}
	name := fleet.ServiceName("w.1")
	look := func(step string, a stasisv1alpha1.Actor) (*corev1.Service, *discoveryv1.EndpointSlice) {
		t.Helper()
		if err := c.keepEndpoints(ctx, []stasisv1alpha1.Actor{a, other}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		var svc corev1.Service
		var slice discoveryv1.EndpointSlice
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &svc); err != nil {
			t.Fatalf("%s: Service: %v", step, err)
		}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &slice); err != nil {
			t.Fatalf("%s: EndpointSlice: %v", step, err)
		}
		if slice.Labels[discoveryv1.LabelServiceName] != name || svc.Spec.Selector != nil || len(svc.Spec.Ports) != 2 ||
			svc.Spec.Ports[0].Name != "tcp-8000" || svc.Spec.Ports[1].Name != "metrics" || svc.OwnerReferences[0].UID != "uid-1" {
			t.Fatalf("%s: Service %+v, slice labels %v", step, svc.Spec, slice.Labels)
		}
		return &svc, &slice
	}
	endpoint := func(slice *discoveryv1.EndpointSlice) string {
		if len(slice.Endpoints) == 0 {
			return "none"
		}
		e := slice.Endpoints[0]
		var ports []string
		for _, p := range slice.Ports {
			ports = append(ports, *p.Name+"="+itoa(*p.Port))
		}
		return e.Addresses[0] + " " + *e.NodeName + " ready=" + btoa(*e.Conditions.Ready) + " " + strings.Join(ports, ",")
	}

	_, slice := look("new", actor)
	if got := endpoint(slice); got != "none" {
		t.Fatalf("an unbound actor's endpoint: %s", got)
	}
	actor.Status = stasisv1alpha1.ActorStatus{Node: "node-a", Phase: stasisv1alpha1.PhaseRunning,
		Endpoint: &stasisv1alpha1.Endpoint{Service: name, Address: "10.0.0.1", Ports: []stasisv1alpha1.EndpointPort{{Port: 31001, ContainerPort: 8000}, {Port: 31002, ContainerPort: 9090}}}}
	if _, slice = look("running", actor); endpoint(slice) != "10.0.0.1 node-a ready=true tcp-8000=31001,metrics=31002" {
		t.Fatalf("running on node-a: %s", endpoint(slice))
	}
	actor.Status.Phase, actor.Status.Idle = stasisv1alpha1.PhaseSuspended, true
	if _, slice = look("idle", actor); endpoint(slice) != "10.0.0.1 node-a ready=true tcp-8000=31001,metrics=31002" {
		t.Fatalf("suspended by its idle policy: %s", endpoint(slice))
	}
	actor.Status.Phase, actor.Status.Idle = stasisv1alpha1.PhasePaused, false
	if _, slice = look("paused", actor); endpoint(slice) != "10.0.0.1 node-a ready=false tcp-8000=31001,metrics=31002" {
		t.Fatalf("paused as its spec asks: %s", endpoint(slice))
	}
	actor.Status.Node, actor.Status.Phase, actor.Status.Endpoint = "", stasisv1alpha1.PhasePending, &stasisv1alpha1.Endpoint{Service: name}
	if _, slice = look("moving", actor); endpoint(slice) != "none" {
		t.Fatalf("bound to no node: %s", endpoint(slice))
	}
	actor.Status = stasisv1alpha1.ActorStatus{Node: "node-b", Phase: stasisv1alpha1.PhaseRunning,
		Endpoint: &stasisv1alpha1.Endpoint{Service: name, Address: "fd00::2", Ports: []stasisv1alpha1.EndpointPort{{Port: 31005, ContainerPort: 8000}}}}
	if _, slice = look("moved", actor); endpoint(slice) != "fd00::2 node-b ready=true tcp-8000=31005" || slice.AddressType != discoveryv1.AddressTypeIPv6 {
		t.Fatalf("moved to node-b: %s (%s)", endpoint(slice), slice.AddressType)
	}
	var services corev1.ServiceList
	if err := kube.List(ctx, &services); err != nil || len(services.Items) != 1 {
		t.Fatalf("Services: %d, %v; want the serving actor's alone", len(services.Items), err)
	}

	// Gone: its Service and slice with it.
	if err := c.keepEndpoints(ctx, []stasisv1alpha1.Actor{other}); err != nil {
		t.Fatal(err)
	}
	if err := kube.List(ctx, &services); err != nil || len(services.Items) != 0 {
		t.Fatalf("Services after the actor went: %d, %v", len(services.Items), err)
	}

	// Another's Service under the name: left alone.
	squatter := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "mine"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}}
	if err := kube.Create(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	actor.UID = "uid-3"
	if err := c.keepEndpoints(ctx, []stasisv1alpha1.Actor{actor}); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := kube.Get(ctx, client.ObjectKeyFromObject(squatter), &svc); err != nil || svc.Labels["app"] != "mine" || len(svc.Spec.Ports) != 1 {
		t.Fatalf("another's Service: %+v, %v", svc, err)
	}
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func btoa(b bool) string { return strconv.FormatBool(b) }
