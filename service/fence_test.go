package service_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/runtime"
)

// renew renews the fleet lease for seconds, binding bound here.
func (e *env) renew(seconds float64, bound ...string) api.Lease {
	e.t.Helper()
	l, err := e.svc.RenewLease(context.Background(), api.LeaseRequest{Holder: "agent on node-a", ValidForSeconds: seconds, Bound: bound})
	if err != nil {
		e.t.Fatalf("renew the lease: %v", err)
	}
	return l
}

// lapse renews the fleet lease for a millisecond, waits until it has
// lapsed and has the service act on it.
func (e *env) lapse(bound ...string) {
	e.t.Helper()
	e.renew(0.001, bound...)
	for {
		l, err := e.svc.Lease(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if l.Lapsed {
			break
		}
	}
	e.enforce()
}

func (e *env) enforce() {
	e.t.Helper()
	if err := e.svc.EnforceLease(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// TestLapsedLeaseFencesFleetActors: while the fleet lease holds nothing
// changes; once it lapses every running fleet actor is frozen (FENCED),
// the node's own actors (an id with '_') run on, and fleet actors neither
// run nor resume; a renewal thaws those it binds here, with their state,
// and leaves the others FENCED, which a resume then refuses and a delete
// removes.
func TestLapsedLeaseFencesFleetActors(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	for _, id := range []string{"f1", "f2", "own_1"} {
		e.run(id)
	}
	inst, _, _ := strings.Cut(e.counter("f1", "incr"), " ")
	e.renew(600, "f1", "f2")
	e.enforce()
	for _, id := range []string{"f1", "f2", "own_1"} {
		if a := e.actor(id); a.State != api.Running {
			t.Fatalf("under a lease that holds, %s: %+v", id, a)
		}
	}
	e.lapse("f1", "f2")
	for id, want := range map[string]api.State{"f1": api.Fenced, "f2": api.Fenced, "own_1": api.Running} {
		a := e.actor(id)
		if a.State != want || want == api.Fenced && (!strings.Contains(a.Reason, "lapsed") || e.status(id) != runtime.StatusPaused) {
			t.Fatalf("after the lease lapsed, %s: %+v, sandbox %s; want %s", id, a, e.status(id), want)
		}
	}
	ctx := context.Background()
	if _, err := e.svc.Run(ctx, api.RunRequest{Template: "t", ID: "f3"}); code(err) != "unavailable" || !strings.Contains(err.Error(), "lapsed") {
		t.Fatalf("run of a fleet actor while the lease has lapsed: %v", err)
	}
	if _, err := e.svc.Resume(ctx, api.OpRequest{ID: "f1"}); code(err) != "unavailable" {
		t.Fatalf("resume of a fenced actor while the lease has lapsed: %v", err)
	}
	e.run("own_2") // the node's own actors are not the fleet's
	l := e.renew(600, "f1")
	if l.Lapsed || len(l.Fenced) != 2 {
		t.Fatalf("the renewal answered %+v", l)
	}
	e.enforce()
	if a := e.actor("f1"); a.State != api.Running || e.status("f1") != runtime.StatusRunning {
		t.Fatalf("f1, bound here, after the renewal: %+v, sandbox %s", a, e.status("f1"))
	}
	if got := e.counter("f1", "incr"); got != inst+" 2" {
		t.Fatalf("f1 counts %q after its thaw", got)
	}
	if a := e.actor("f2"); a.State != api.Fenced {
		t.Fatalf("f2, not bound here, after the renewal: %+v", a)
	}
	if _, err := e.svc.Resume(ctx, api.OpRequest{ID: "f2"}); code(err) != "failed_precondition" || !strings.Contains(err.Error(), "does not bind it here") {
		t.Fatalf("resume of a fenced actor the lease does not bind here: %v", err)
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "f2"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.rt.Sandbox(api.SandboxID("f2")); ok {
		t.Fatal("the deleted fenced actor's sandbox is left")
	}
}

// TestLeaseOutlivesARestart: a lease that lapsed while stasisd was down
// fences as stasisd starts; a sandbox found frozen (the agent fenced it
// while stasisd did not answer) makes its RUNNING actor FENCED, not
// CRASHED, and a renewal that binds it thaws it.
func TestLeaseOutlivesARestart(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("f1")
	e.run("f2")
	inst, _, _ := strings.Cut(e.counter("f2", "incr"), " ")
	e.renew(0.001, "f1", "f2")
	// The agent froze f2 itself, with the lease's fence command.
	sb, _ := e.rt.Sandbox(api.SandboxID("f2"))
	sb.Status = runtime.StatusPaused
	e.rt.Put(api.SandboxID("f2"), &sb)
	e.restart()
	if a := e.actor("f2"); a.State != api.Fenced || !strings.Contains(a.Reason, "found frozen") {
		t.Fatalf("f2, frozen while stasisd was down: %+v", a)
	}
	e.enforce()
	if a := e.actor("f1"); a.State != api.Fenced || e.status("f1") != runtime.StatusPaused {
		t.Fatalf("f1 after a start with the lease lapsed: %+v", a)
	}
	e.renew(600, "f1", "f2")
	e.enforce()
	for _, id := range []string{"f1", "f2"} {
		if a := e.actor(id); a.State != api.Running {
			t.Fatalf("%s after the renewal: %+v", id, a)
		}
	}
	if got := e.counter("f2", "incr"); got != inst+" 2" {
		t.Fatalf("f2 counts %q", got)
	}
}

// TestLeaseRequestsRefused: a malformed renewal is refused and changes
// nothing; a release ends fencing and leaves FENCED actors for a resume.
func TestLeaseRequestsRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("f1")
	ctx := context.Background()
	for _, req := range []api.LeaseRequest{
		{Holder: "", ValidForSeconds: 10},
		{Holder: strings.Repeat("h", 300), ValidForSeconds: 10},
		{Holder: "a\nb", ValidForSeconds: 10},
		{Holder: "a", ValidForSeconds: 0},
		{Holder: "a", ValidForSeconds: -1},
		{Holder: "a", ValidForSeconds: 1e12},
		{Holder: "a", ValidForSeconds: 10, Bound: []string{"../x"}},
	} {
		if _, err := e.svc.RenewLease(ctx, req); code(err) != "invalid_argument" {
			t.Errorf("renewal %+v: %v; want invalid_argument", req, err)
		}
	}
	if l, err := e.svc.Lease(ctx); err != nil || l.Holder != "" || l.Lapsed {
		t.Fatalf("after refused renewals the lease is %+v, %v", l, err)
	}
	e.lapse()
	if a := e.actor("f1"); a.State != api.Fenced {
		t.Fatalf("f1: %+v", a)
	}
	if l, err := e.svc.ReleaseLease(ctx); err != nil || l.Holder != "" || len(l.Fenced) != 1 {
		t.Fatalf("release: %+v %v", l, err)
	}
	e.enforce()
	if a := e.actor("f1"); a.State != api.Fenced {
		t.Fatalf("f1 after the release: %+v; a release thaws nothing by itself", a)
	}
	if a, err := e.svc.Resume(ctx, api.OpRequest{ID: "f1"}); err != nil || a.State != api.Running {
		t.Fatalf("resume of a fenced actor without a lease: %+v %v", a, err)
	}
}

// TestRenewalOfAnOlderEpochThawsNothing: stasisd records the newest
// fencing epoch a renewal showed it, across a restart; a renewal of an
// older one (an agent that read the node's Lease before the fleet moved
// its actors) is refused, renews nothing and thaws nothing. A release
// gives the epoch up with the lease.
func TestRenewalOfAnOlderEpochThawsNothing(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("f1")
	ctx := context.Background()
	renew := func(epoch int64, seconds float64) (api.Lease, error) {
		return e.svc.RenewLease(ctx, api.LeaseRequest{Holder: "agent on node-a", ValidForSeconds: seconds, Bound: []string{"f1"}, Epoch: epoch})
	}
	if l, err := renew(3, 0.001); err != nil || l.Epoch != 3 {
		t.Fatalf("renewal of epoch 3: %+v, %v", l, err)
	}
	for {
		if l, err := e.svc.Lease(ctx); err != nil || l.Lapsed {
			break
		}
	}
	e.enforce()
	if a := e.actor("f1"); a.State != api.Fenced {
		t.Fatalf("f1 after the lease lapsed: %+v", a)
	}
	e.restart()
	for _, old := range []int64{2, 0} {
		_, err := renew(old, 600)
		if code(err) != "failed_precondition" || !strings.Contains(err.Error(), "epoch 3 was shown") {
			t.Fatalf("renewal of epoch %d after epoch 3: %v; want it refused naming both", old, err)
		}
	}
	e.enforce()
	l, err := e.svc.Lease(ctx)
	if err != nil || !l.Lapsed || l.Epoch != 3 {
		t.Fatalf("the lease after refused renewals: %+v, %v; want it lapsed as it was, at epoch 3", l, err)
	}
	if a := e.actor("f1"); a.State != api.Fenced {
		t.Fatalf("f1 after a refused renewal: %+v; want it still FENCED", a)
	}
	if l, err := renew(4, 600); err != nil || l.Epoch != 4 || l.Lapsed {
		t.Fatalf("renewal of epoch 4: %+v, %v", l, err)
	}
	e.enforce()
	if a := e.actor("f1"); a.State != api.Running {
		t.Fatalf("f1 after the renewal of the newest epoch: %+v", a)
	}
	if _, err := e.svc.ReleaseLease(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := renew(1, 600); err != nil || l.Epoch != 1 {
		t.Fatalf("renewal of epoch 1 after a release: %+v, %v; a release gives the epoch up", l, err)
	}
}

// TestAnOperationFrozenUnderItEndsFenced: the fence's commands (the
// watchdog's, the agent's) freeze the sandboxes of operations under way
// too; a suspend whose sandbox was frozen under it fails, and the actor is
// FENCED, its memory whole, not CRASHED with a live frozen sandbox; the
// renewal that binds it here thaws it, and it counts on.
func TestAnOperationFrozenUnderItEndsFenced(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("f1")
	inst, _, _ := strings.Cut(e.counter("f1", "incr"), " ")
	e.renew(600, "f1")
	var frozen atomic.Bool
	e.rt.Hook = func(ctx context.Context, method, id string) error {
		if method != "Checkpoint" || frozen.Swap(true) {
			return nil
		}
		// The watchdog's command lands first.
		if err := e.rt.Pause(ctx, id); err != nil {
			return err
		}
		return errors.New("checkpointing container: the container is paused")
	}
	if _, err := e.svc.Suspend(ctx, api.OpRequest{ID: "f1"}); err == nil {
		t.Fatal("a suspend of a sandbox frozen under it succeeded")
	}
	if a := e.actor("f1"); a.State != api.Fenced || !strings.Contains(a.Reason, "frozen") || e.status("f1") != runtime.StatusPaused {
		t.Fatalf("after the suspend failed with its sandbox frozen: %+v, sandbox %s; want FENCED", a, e.status("f1"))
	}
	e.renew(600, "f1")
	e.enforce()
	if a := e.actor("f1"); a.State != api.Running || e.status("f1") != runtime.StatusRunning {
		t.Fatalf("after the renewal: %+v, sandbox %s; want RUNNING", a, e.status("f1"))
	}
	if got := e.counter("f1", "incr"); got != inst+" 2" {
		t.Fatalf("f1 counts %q after its thaw", got)
	}
}

// TestAStartFrozenUnderItEndsFenced: a run whose sandbox the fence froze
// while it started (its probe answered first) ends FENCED, not RUNNING
// with a frozen sandbox that no renewal would thaw; the renewal that binds
// it here thaws it, and it counts.
func TestAStartFrozenUnderItEndsFenced(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.template("t", nil)
	e.renew(600, "f1")
	var probed, frozen atomic.Bool
	e.rt.Hook = func(ctx context.Context, method, id string) error {
		switch {
		case method == "Exec":
			probed.Store(true)
		case method == "State" && probed.Load() && !frozen.Swap(true):
			// The probe answered; the watchdog's command lands before
			// the run ends.
			return e.rt.Pause(ctx, id)
		}
		return nil
	}
	a, err := e.svc.Run(ctx, api.RunRequest{Template: "t", ID: "f1"})
	e.rt.Hook = nil
	if err != nil {
		t.Fatal(err)
	}
	if a.State != api.Fenced || !strings.Contains(a.Reason, "frozen by the fence") || e.status("f1") != runtime.StatusPaused {
		t.Fatalf("the run whose sandbox was frozen under it: %+v, sandbox %s; want FENCED", a, e.status("f1"))
	}
	e.enforce()
	if got := e.actor("f1"); got.State != api.Running || e.status("f1") != runtime.StatusRunning {
		t.Fatalf("after the renewal: %+v, sandbox %s; want RUNNING", got, e.status("f1"))
	}
	if got := e.counter("f1", "incr"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("f1 counts %q", got)
	}
}
