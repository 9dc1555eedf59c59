package engine_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestKeptSandboxResumesWithoutLoading: a suspend told to keep the sandbox
// commits its snapshot and leaves the sandbox frozen; ResumeKept brings
// the same process back without a restore. A kept sandbox that is gone is
// ErrNotKept, and the snapshot still resumes it; a suspend told not to keep
// stops the sandbox as always.
func TestKeptSandboxResumesWithoutLoading(t *testing.T) {
	f := newFixture(t)
	a := f.start("kept", testactor.Options{})
	inst, _ := instanceAndValue(f.incr(a.ID, 2))
	ctx := context.Background()
	keep := func() (bool, string) { return true, "the test asks" }
	probe := engine.Probe{Command: []string{"/counter", "await", "get"}}

	steps := func() map[string]bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		seen := map[string]bool{}
		for _, ev := range f.events {
			seen[ev.Op+"/"+ev.Name] = true
		}
		f.events = nil
		return seen
	}
	status := func() runtime.Status {
		st, err := f.rt.State(ctx, a.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			return runtime.StatusStopped
		}
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}

	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Keep: keep}); err != nil {
		t.Fatal(err)
	}
	if st, seen := status(), steps(); st != runtime.StatusPaused || !seen["suspend/freeze"] || seen["suspend/stop"] {
		t.Fatalf("after a suspend that keeps: sandbox %s, steps %v; want paused, frozen and not stopped", st, seen)
	}
	if err := f.eng.ResumeKept(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Probe: probe}); err != nil {
		t.Fatal(err)
	}
	if seen := steps(); !seen["resume/unpause"] || !seen["resume/probe"] || seen["resume/restore"] {
		t.Fatalf("kept resume steps %v; want unpause and probe, no restore", seen)
	}
	if got, want := f.counter(a.ID, "incr"), inst+" 3"; got != want {
		t.Fatalf("after the kept resume the counter says %q, want %q", got, want)
	}

	// Kept again, then the frozen sandbox is lost: the snapshot serves.
	dir = filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Keep: keep}); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Stop(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.ResumeKept(ctx, a, dir, engine.ResumeOptions{Observer: f.obs}); !errors.Is(err, engine.ErrNotKept) {
		t.Fatalf("kept resume of a stopped sandbox: %v; want ErrNotKept", err)
	}
	if err := f.rt.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Probe: probe}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.counter(a.ID, "incr"), inst+" 4"; got != want {
		t.Fatalf("after the resume from the snapshot the counter says %q, want %q", got, want)
	}

	// Not kept: stopped, and the reason is in the history.
	steps()
	dir = filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Keep: func() (bool, string) { return false, "no room" }}); err != nil {
		t.Fatal(err)
	}
	f.requireGone(a.ID)
	f.mu.Lock()
	noted := false
	for _, ev := range f.events {
		noted = noted || ev.Name == "note" && strings.Contains(ev.Message, "not kept in memory: no room")
	}
	f.mu.Unlock()
	if !noted {
		t.Fatalf("no note says why the sandbox was not kept: %+v", f.events)
	}
}
