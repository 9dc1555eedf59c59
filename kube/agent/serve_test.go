package agent

import (
	"testing"

	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestIdleActorsRunAsAsked: an actor its idle policy paused or suspended
// is left as it is for spec.phase Running (the next connection wakes it);
// one paused or suspended by a caller is resumed.
func TestIdleActorsRunAsAsked(t *testing.T) {
	for _, c := range []struct {
		want  stasisv1alpha1.Phase
		local api.Actor
		acts  bool
	}{
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Suspended, Idle: true}, false},
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Paused, Idle: true}, false},
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Suspended}, true},
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Paused}, true},
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Running}, false},
		{stasisv1alpha1.PhasePaused, api.Actor{State: api.Running}, true},
		{stasisv1alpha1.PhasePaused, api.Actor{State: api.Suspended, Idle: true}, false},
		{stasisv1alpha1.PhaseSuspended, api.Actor{State: api.Suspended, Idle: true}, true},
		{stasisv1alpha1.PhaseRunning, api.Actor{State: api.Fenced}, false},
	} {
		if got := acts(c.want, c.local); got != c.acts {
			t.Errorf("want %s, stasisd has %s (idle %v): acts %v, want %v", c.want, c.local.State, c.local.Idle, got, c.acts)
		}
	}
}

// TestEndpointOfAnActor: the node's address and each published port; none
// for an actor that publishes nothing; its Service alone once released.
func TestEndpointOfAnActor(t *testing.T) {
	a := &Agent{Address: "192.0.2.7"}
	local := api.Actor{Network: &api.ActorNetwork{Mode: "cni", Address: "10.89.0.3", Ports: []api.Port{{HostPort: 40001, ContainerPort: 8000}}}}
	e := a.endpoint("w.1", local)
	if e == nil || e.Address != "192.0.2.7" || len(e.Ports) != 1 || e.Ports[0] != (stasisv1alpha1.EndpointPort{Port: 40001, ContainerPort: 8000}) || e.Service == "" {
		t.Fatalf("endpoint: %+v", e)
	}
	if u := unbound(e); u.Service != e.Service || u.Address != "" || u.Ports != nil {
		t.Fatalf("released: %+v", u)
	}
	if e := a.endpoint("w2", api.Actor{Network: &api.ActorNetwork{Mode: "cni"}}); e != nil {
		t.Fatalf("an actor that publishes nothing: %+v", e)
	}
}
