package controller

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// managedBy marks the EndpointSlices this controller keeps, so that
// Kubernetes' own EndpointSlice controller leaves them alone.
const managedBy = "controller.stasis.dev"

// endpoints is what the controller keeps for one serving actor.
type endpoints struct {
	service *corev1.Service
	slice   *discoveryv1.EndpointSlice
}

// keepEndpoints keeps a Service and an EndpointSlice for every actor whose
// template publishes ports: the Service, without a selector, gives the
// actor one stable name; the slice names the node the actor is bound to
// and its published ports there (status.endpoint, written by that node's
// agent), ready while the actor runs or waits to be woken by a connection.
// A moved actor's slice follows it; one bound to no node has none. Only
// what changed since this controller last wrote it is written.
func (c *Controller) keepEndpoints(ctx context.Context, actors []stasisv1alpha1.Actor) error {
	var templates stasisv1alpha1.ActorTemplateList
	if err := c.Kube.List(ctx, &templates, client.InNamespace(c.Namespace)); err != nil {
		return err
	}
	ports := map[string][]stasisv1alpha1.Port{}
	for _, t := range templates.Items {
		ports[t.Name] = t.Spec.Ports
	}
	if c.endpoints == nil {
		c.endpoints = map[types.UID]endpoints{}
	}
	seen := map[types.UID]bool{}
	for i := range actors {
		a := &actors[i]
		p := ports[a.Spec.Template]
		if len(p) == 0 {
			continue
		}
		seen[a.UID] = true
		want := desiredEndpoints(a, p)
		if have, ok := c.endpoints[a.UID]; ok && equality.Semantic.DeepEqual(have.service, want.service) && equality.Semantic.DeepEqual(have.slice, want.slice) {
			continue
		}
		if err := c.writeEndpoints(ctx, a, want); err != nil {
			c.Log.Warn("actor endpoints", "actor", a.Name, "err", err)
			continue
		}
		c.endpoints[a.UID] = want
	}
	for uid, e := range c.endpoints {
		if seen[uid] {
			continue
		}
		// The actor is gone (its owner reference lets Kubernetes'
		// garbage collector remove them too) or serves no ports any more.
		for _, obj := range []client.Object{e.service, e.slice} {
			if err := c.Kube.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
				c.Log.Warn("actor endpoints", "object", obj.GetName(), "err", err)
			}
		}
		delete(c.endpoints, uid)
	}
	return nil
}

// desiredEndpoints are the Service and EndpointSlice of actor a, whose
// template publishes ports.
func desiredEndpoints(a *stasisv1alpha1.Actor, ports []stasisv1alpha1.Port) endpoints {
	name := fleet.ServiceName(a.Name)
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: a.Namespace, Name: name, Labels: map[string]string{fleet.ActorLabel: a.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: stasisv1alpha1.GroupVersion.String(), Kind: "Actor", Name: a.Name, UID: a.UID}}}
	}
	svc := &corev1.Service{ObjectMeta: meta()}
	named := map[int32]string{}
	for _, p := range ports {
		pn := portName(p)
		named[p.ContainerPort] = pn
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: pn, Protocol: corev1.ProtocolTCP, Port: p.ContainerPort, TargetPort: intstr.FromInt32(p.ContainerPort)})
	}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: meta(), AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{}, Ports: []discoveryv1.EndpointPort{}}
	slice.Labels[discoveryv1.LabelServiceName] = name
	slice.Labels[discoveryv1.LabelManagedBy] = managedBy
	e := a.Status.Endpoint
	if a.Status.Node == "" || e == nil || e.Address == "" || len(e.Ports) == 0 {
		return endpoints{service: svc, slice: slice}
	}
	if addr, err := netip.ParseAddr(e.Address); err == nil && addr.Is6() && !addr.Is4In6() {
		slice.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, p := range e.Ports {
		pn, ok := named[p.ContainerPort]
		if !ok {
			continue // published by an older version of its template
		}
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: &pn, Protocol: ptr(corev1.ProtocolTCP), Port: ptr(p.Port)})
	}
	ready := serving(a.Status)
	slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{e.Address}, NodeName: ptr(a.Status.Node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(ready), Serving: ptr(ready), Terminating: ptr(false)}})
	return endpoints{service: svc, slice: slice}
}

// serving says whether a connection through the actor's node reaches it:
// it runs, or its idle policy paused or suspended it there and the
// connection wakes it.
func serving(s stasisv1alpha1.ActorStatus) bool {
	switch s.Phase {
	case stasisv1alpha1.PhaseRunning:
		return true
	case stasisv1alpha1.PhasePaused, stasisv1alpha1.PhaseSuspended:
		return s.Idle
	}
	return false
}

// portName is a port's name in the actor's Service.
func portName(p stasisv1alpha1.Port) string {
	if p.Name != "" {
		return p.Name
	}
	return "tcp-" + strconv.Itoa(int(p.ContainerPort))
}

// writeEndpoints creates or updates the actor's Service and EndpointSlice.
// One of another actor (two names that make one Service name) is left
// alone, and the refusal says so.
func (c *Controller) writeEndpoints(ctx context.Context, a *stasisv1alpha1.Actor, want endpoints) error {
	var svc corev1.Service
	err := c.Kube.Get(ctx, client.ObjectKeyFromObject(want.service), &svc)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Kube.Create(ctx, want.service.DeepCopy()); err != nil {
			return fmt.Errorf("create Service %s: %w", want.service.Name, err)
		}
	case err != nil:
		return err
	case svc.Labels[fleet.ActorLabel] != a.Name:
		return fmt.Errorf("the Service %s exists and is not actor %s's (label %s=%q); the actor has no Service", svc.Name, a.Name, fleet.ActorLabel, svc.Labels[fleet.ActorLabel])
	default:
		// The cluster IP and whatever else the API server set are kept.
		svc.Labels, svc.OwnerReferences, svc.Spec.Ports = want.service.Labels, want.service.OwnerReferences, want.service.Spec.Ports
		if err := c.Kube.Update(ctx, &svc); err != nil {
			return fmt.Errorf("update Service %s: %w", svc.Name, err)
		}
	}
	var slice discoveryv1.EndpointSlice
	err = c.Kube.Get(ctx, client.ObjectKeyFromObject(want.slice), &slice)
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Kube.Create(ctx, want.slice.DeepCopy()); err != nil {
			return fmt.Errorf("create EndpointSlice %s: %w", want.slice.Name, err)
		}
		return nil
	case err != nil:
		return err
	case slice.Labels[fleet.ActorLabel] != a.Name:
		return fmt.Errorf("EndpointSlice %s exists and is not actor %s's", slice.Name, a.Name)
	case slice.AddressType != want.slice.AddressType:
		// Its address type cannot change: the slice is made again.
		if err := c.Kube.Delete(ctx, &slice); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete EndpointSlice %s: %w", slice.Name, err)
		}
		return c.Kube.Create(ctx, want.slice.DeepCopy())
	}
	slice.Labels, slice.OwnerReferences = want.slice.Labels, want.slice.OwnerReferences
	slice.AddressType, slice.Endpoints, slice.Ports = want.slice.AddressType, want.slice.Endpoints, want.slice.Ports
	if err := c.Kube.Update(ctx, &slice); err != nil {
		return fmt.Errorf("update EndpointSlice %s: %w", slice.Name, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
