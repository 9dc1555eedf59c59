package service_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service"
)

const gib = 1 << 30

// keepingEnv is a service with template "t" under a keep policy whose node
// has 16 GiB, of which available are free: 10 GiB, above the default
// reserve of a quarter (4 GiB), until the test moves it.
func keepingEnv(t *testing.T) (*env, *atomic.Uint64) {
	available := &atomic.Uint64{}
	available.Store(10 * gib)
	e := newEnv(t, func(c *service.Config) {
		c.KeepPaused = &service.KeepPolicy{Memory: func() (uint64, uint64, error) { return available.Load(), 16 * gib, nil }}
	})
	e.template("t", nil)
	return e, available
}

// status is where actor id's sandbox stands in the runtime.
func (e *env) status(id string) runtime.Status {
	e.t.Helper()
	s, ok := e.rt.Sandbox(e.actor(id).Sandbox)
	if !ok {
		return runtime.StatusStopped
	}
	return s.Status
}

func (e *env) pause(id string) api.Actor {
	e.t.Helper()
	a, err := e.svc.Pause(context.Background(), api.OpRequest{ID: id})
	if err != nil || a.State != api.Paused {
		e.t.Fatalf("pause %s: %+v %v", id, a, err)
	}
	return a
}

func (e *env) resume(id string) {
	e.t.Helper()
	if a, err := e.svc.Resume(context.Background(), api.OpRequest{ID: id}); err != nil || a.State != api.Running {
		e.t.Fatalf("resume %s: %+v %v", id, a, err)
	}
}

// TestPauseKeepsTheSandboxWhileThereIsRoom: with room, a pause keeps the
// sandbox frozen beside its snapshot and the resume thaws it without a
// restore, also after stasisd restarts; without room the pause stops it and
// the resume restores the snapshot.
func TestPauseKeepsTheSandboxWhileThereIsRoom(t *testing.T) {
	e, available := keepingEnv(t)
	e.run("a1")
	inst, _, _ := strings.Cut(e.counter("a1", "incr"), " ")

	a := e.pause("a1")
	if e.status("a1") != runtime.StatusPaused || !strings.Contains(a.Reason, "kept in memory") || a.Snapshot == nil || a.Snapshot.Dir == "" {
		t.Fatalf("a pause with room: sandbox %s, actor %+v; want the sandbox frozen, the snapshot on disk", e.status("a1"), a)
	}
	e.restart()
	if e.status("a1") != runtime.StatusPaused {
		t.Fatalf("after a restart the kept sandbox is %s", e.status("a1"))
	}
	restores := e.rt.Calls["Restore"]
	e.resume("a1")
	if e.rt.Calls["Restore"] != restores {
		t.Fatal("the resume of a kept sandbox restored its snapshot")
	}
	if got := e.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("after the kept resume the counter says %q, want %s 2", got, inst)
	}

	available.Store(3 * gib)
	a = e.pause("a1")
	if e.status("a1") != runtime.StatusStopped || strings.Contains(a.Reason, "kept") {
		t.Fatalf("a pause under the reserve: sandbox %s, actor %+v; want it stopped", e.status("a1"), a)
	}
	e.resume("a1")
	if e.rt.Calls["Restore"] != restores+1 {
		t.Fatal("the resume of a stopped pause did not restore its snapshot")
	}
	if got := e.counter("a1", "incr"); got != inst+" 3" {
		t.Fatalf("after the resume from the snapshot the counter says %q, want %s 3", got, inst)
	}
}

// TestReleaseStopsKeptSandboxesUnderTheReserve: when the node falls under
// the reserve, the longest paused actor's kept sandbox is stopped first,
// until there is room again; the actors stay PAUSED and resume from their
// snapshots.
func TestReleaseStopsKeptSandboxesUnderTheReserve(t *testing.T) {
	e, available := keepingEnv(t)
	for _, id := range []string{"old", "new"} {
		e.run(id)
		e.counter(id, "incr")
		e.pause(id)
	}
	ctx := context.Background()
	if n, err := e.svc.Release(ctx); n != 0 || err != nil {
		t.Fatalf("release with room: %d %v; want none", n, err)
	}
	// Under the reserve by less than one sandbox: stopping one is enough.
	e.rt.Hook = func(_ context.Context, method, _ string) error {
		if method == "Stop" {
			available.Store(5 * gib)
		}
		return nil
	}
	available.Store(3 * gib)
	if n, err := e.svc.Release(ctx); n != 1 || err != nil {
		t.Fatalf("release under the reserve: %d %v; want 1", n, err)
	}
	if e.status("old") != runtime.StatusStopped || e.status("new") != runtime.StatusPaused {
		t.Fatalf("old %s, new %s; want the longest paused stopped, the other kept", e.status("old"), e.status("new"))
	}
	old := e.actor("old")
	if old.State != api.Paused || !strings.Contains(old.Reason, "stopped to free memory") {
		t.Fatalf("released actor: %+v", old)
	}
	e.resume("old")
	if got := e.counter("old", "get"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("the released actor resumed with counter %q, want 1", got)
	}
}

// TestKeptResumeFallsBackToTheSnapshot: a kept sandbox that fails to thaw
// is removed and the snapshot resumes the actor; suspending a kept actor
// stores its snapshot and stops the sandbox.
func TestKeptResumeFallsBackToTheSnapshot(t *testing.T) {
	e, _ := keepingEnv(t)
	e.run("a1")
	e.counter("a1", "incr")
	e.pause("a1")
	e.rt.Hook = func(_ context.Context, method, _ string) error {
		if method == "Unpause" {
			return errors.New("injected: unpause failed")
		}
		return nil
	}
	e.resume("a1")
	e.rt.Hook = nil
	if e.rt.Calls["Restore"] != 1 {
		t.Fatalf("restores %d; want the snapshot restored after the kept sandbox failed", e.rt.Calls["Restore"])
	}
	if got := e.counter("a1", "incr"); !strings.HasSuffix(got, " 2") {
		t.Fatalf("counter %q after the fallback, want 2", got)
	}
	ev, err := e.svc.Events(context.Background(), api.EventsRequest{ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	noted := false
	for _, x := range ev.Events {
		noted = noted || strings.Contains(x.Message, "could not be resumed") && strings.Contains(x.Message, "injected: unpause failed")
	}
	if !noted {
		t.Fatalf("the history does not say why the kept sandbox was not used: %+v", ev.Events)
	}

	e.pause("a1")
	a, err := e.svc.Suspend(context.Background(), api.OpRequest{ID: "a1"})
	if err != nil || a.State != api.Suspended || a.Snapshot.Stored == "" {
		t.Fatalf("suspend of a kept actor: %+v %v", a, err)
	}
	if e.status("a1") != runtime.StatusStopped {
		t.Fatalf("a suspended actor's kept sandbox is %s", e.status("a1"))
	}
}
