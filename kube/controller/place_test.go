package controller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
	"github.com/stasis-run/stasis/runtime"
)

// TestPlacement: an actor that starts afresh (no snapshot) goes to the
// fitting node with the fewest actors; a node that is lost, draining,
// tainted out of service, has no readable fingerprint, runs no such
// runtime or has too few GPUs is passed over, and when none fits the
// reason names every node and why; a pin to a node that runs no agent says
// so; a missing template is an error naming it.
func TestPlacement(t *testing.T) {
	ctx := context.Background()
	kube := fleetOf(t) // with template t; two more below
	for _, tmpl := range []*stasisv1alpha1.ActorTemplate{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "two-gpus"}, Spec: stasisv1alpha1.ActorTemplateSpec{GPUs: 2}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm"}, Spec: stasisv1alpha1.ActorTemplateSpec{Runtime: api.RuntimeMicroVM}},
	} {
		if err := kube.Create(ctx, tmpl); err != nil {
			t.Fatal(err)
		}
	}
	c := controllerOf(kube, nil)
	node := func(name string, gpus int, edit func(*fleet.Node)) fleet.Node {
		n := fleet.Node{Name: name, Alive: true, Fingerprint: fingerprint.Fingerprint{Runtime: runtime.Info{Name: "gvisor"}}}
		for i := range gpus {
			n.Fingerprint.GPU.Devices = append(n.Fingerprint.GPU.Devices, gpu.Device{Index: i})
		}
		if edit != nil {
			edit(&n)
		}
		return n
	}
	nodesOf := func(ns ...fleet.Node) map[string]fleet.Node {
		out := map[string]fleet.Node{}
		for _, n := range ns {
			out[n.Name] = n
		}
		return out
	}
	actor := func(template, pin string) *stasisv1alpha1.Actor {
		return &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p1"}, Spec: stasisv1alpha1.ActorSpec{Template: template, Node: pin}}
	}
	vmNode := func(n *fleet.Node) {
		n.Fingerprint.Runtimes = []fingerprint.RuntimeOffer{{Name: api.RuntimeMicroVM, Available: true}}
	}
	noVM := func(n *fleet.Node) {
		n.Fingerprint.Runtimes = []fingerprint.RuntimeOffer{{Name: api.RuntimeMicroVM, Reason: "no /dev/kvm"}}
	}
	cases := []struct {
		name     string
		actor    *stasisv1alpha1.Actor
		nodes    map[string]fleet.Node
		load     map[string]int
		want     string   // the node, "" for none
		reasons  []string // in the reason, each
		errNames string   // in the error, "" for none
	}{
		{name: "fewest actors", actor: actor("t", ""), nodes: nodesOf(node("n1", 0, nil), node("n2", 0, nil), node("n3", 0, nil)),
			load: map[string]int{"n1": 4, "n2": 1, "n3": 3}, want: "n2", reasons: []string{"placed on n2, the fitting node with the fewest actors"}},
		{name: "pinned", actor: actor("t", "n3"), nodes: nodesOf(node("n1", 0, nil), node("n3", 0, nil)),
			load: map[string]int{"n3": 9}, want: "n3"},
		{name: "none fits", actor: actor("t", ""), nodes: nodesOf(
			node("lost", 0, func(n *fleet.Node) { n.Alive = false }),
			node("drained", 0, func(n *fleet.Node) { n.Draining = true }),
			node("tainted", 0, func(n *fleet.Node) { n.OutOfService = true }),
			node("unread", 0, func(n *fleet.Node) { n.Problem = "its fingerprint annotation is missing" })),
			reasons: []string{"no node fits", "lost: its lease expired", "drained: draining", "tainted: tainted " + fleet.OutOfServiceTaint, "unread: its fingerprint annotation is missing"}},
		{name: "pinned to no agent", actor: actor("t", "ghost"), nodes: nodesOf(node("n1", 0, nil)),
			reasons: []string{"ghost: no such node runs a Stasis agent"}},
		{name: "GPUs", actor: actor("two-gpus", ""), nodes: nodesOf(node("one", 1, nil), node("two", 2, nil), node("four", 4, nil)),
			load: map[string]int{"two": 2, "four": 1}, want: "four"},
		{name: "too few GPUs", actor: actor("two-gpus", ""), nodes: nodesOf(node("one", 1, nil)),
			reasons: []string{"one: 1 GPU(s), the template needs 2"}},
		{name: "runtime", actor: actor("vm", ""), nodes: nodesOf(node("plain", 0, noVM), node("kvm", 0, vmNode)),
			load: map[string]int{"kvm": 5}, want: "kvm"},
		{name: "no such runtime", actor: actor("vm", ""), nodes: nodesOf(node("plain", 0, noVM), node("old", 0, nil)),
			reasons: []string{"plain: runs no microvm actors (no /dev/kvm)", "old: runs no microvm actors (its stasisd does not know it)"}},
		{name: "no template", actor: actor("gone", ""), nodes: nodesOf(node("n1", 0, nil)), errNames: "ActorTemplate gone does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, _, err := c.place(ctx, tc.actor, tc.nodes, tc.load)
			if tc.errNames != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errNames) {
					t.Fatalf("error %v; want one saying %q", err, tc.errNames)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("placed on %q (%s); want %q", got, reason, tc.want)
			}
			for _, r := range tc.reasons {
				if !strings.Contains(reason, r) {
					t.Errorf("reason %q does not say %q", reason, r)
				}
			}
		})
	}
}
