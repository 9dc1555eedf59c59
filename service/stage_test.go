package service_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/transfer"
)

// storedSnapshot suspends a new actor of template t on e, its counter at
// 2, and returns the stored snapshot's name.
func (e *env) storedSnapshot(id string) string {
	e.t.Helper()
	e.run(id)
	e.counter(id, "incr")
	e.counter(id, "incr")
	a, err := e.svc.Suspend(context.Background(), api.OpRequest{ID: id})
	if err != nil || a.Snapshot == nil || a.Snapshot.Stored == "" {
		e.t.Fatalf("suspend %s: %+v %v", id, a, err)
	}
	return a.Snapshot.Stored
}

// steps are the step names of an actor's history.
func (e *env) steps(id string) []string {
	e.t.Helper()
	res, err := e.svc.Events(context.Background(), api.EventsRequest{ID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	var steps []string
	for _, ev := range res.Events {
		steps = append(steps, ev.Step)
	}
	return steps
}

// TestStagedCopyServesStartsWithoutTheStore: a stored snapshot staged on a
// node that never held it is resumed from where it lies by every actor
// started from it there (no pull), and again by one that crashed; a
// damaged staged copy is dropped and the store read instead.
func TestStagedCopyServesStartsWithoutTheStore(t *testing.T) {
	ctx := context.Background()
	a := newEnv(t, nil)
	a.template("t", nil)
	stored := a.storedSnapshot("m1")

	b := newEnv(t, func(c *service.Config) { c.Repo = a.cfg.Repo; c.StageBudget = 1 << 30 })
	b.template("t", nil)
	st, err := b.svc.Stage(ctx, stored)
	if err != nil || st.Already || st.SizeBytes == 0 || !strings.HasPrefix(st.Dir, b.cfg.DataDir) {
		t.Fatalf("stage: %+v %v", st, err)
	}
	if again, err := b.svc.Stage(ctx, stored); err != nil || !again.Already {
		t.Fatalf("stage again: %+v %v; want already", again, err)
	}
	for _, id := range []string{"x1", "x2"} {
		x, err := b.svc.Run(ctx, api.RunRequest{Template: "t", ID: id, FromStored: stored})
		if err != nil || x.State != api.Running {
			t.Fatalf("run %s from the staged snapshot: %+v %v", id, x, err)
		}
		if got := b.counter(id, "get"); !strings.HasSuffix(got, " 2") {
			t.Fatalf("%s's counter: %q, want 2", id, got)
		}
		if steps := b.steps(id); slices.Contains(steps, transfer.StepPull) {
			t.Fatalf("%s pulled although the snapshot is staged: %v", id, steps)
		}
		if x.Snapshot == nil || x.Snapshot.Stored != stored || x.Snapshot.Dir != "" {
			t.Fatalf("%s's snapshot: %+v; want the stored one, no folder of its own", id, x.Snapshot)
		}
	}
	// x1 crashes: its resume finds the staged copy again.
	b.rt.Put(api.SandboxID("x1"), nil)
	b.restart()
	if x := b.actor("x1"); x.State != api.Crashed {
		t.Fatalf("x1 after its sandbox vanished: %+v", x)
	}
	before := len(b.steps("x1"))
	if x, err := b.svc.Resume(ctx, api.OpRequest{ID: "x1"}); err != nil || x.State != api.Running {
		t.Fatalf("resume of the crashed x1: %+v %v", x, err)
	}
	if steps := b.steps("x1")[before:]; slices.Contains(steps, transfer.StepPull) {
		t.Fatalf("x1's resume pulled: %v", steps)
	}

	// A damaged staged copy: the start reads the store, the copy goes.
	flipAByte(t, filepath.Join(st.Dir, "image", "pages.img"))
	x, err := b.svc.Run(ctx, api.RunRequest{Template: "t", ID: "x3", FromStored: stored})
	if err != nil || x.State != api.Running || !slices.Contains(b.steps("x3"), transfer.StepPull) {
		t.Fatalf("run from a damaged staged copy: %+v %v, steps %v", x, err, b.steps("x3"))
	}
	if got := b.counter("x3", "get"); !strings.HasSuffix(got, " 2") {
		t.Fatalf("x3's counter: %q, want 2", got)
	}
	if list, _ := b.svc.StagedSnapshots(ctx); len(list) != 0 {
		t.Fatalf("the damaged copy is still staged: %+v", list)
	}
}

// TestStagingRefusals: bad names, staging turned off, a snapshot larger
// than the budget and one that is not stored are refused, and nothing is
// left; the copy used longest ago makes room for a new one, never one in
// use.
func TestStagingRefusals(t *testing.T) {
	ctx := context.Background()
	a := newEnv(t, nil)
	a.template("t", nil)
	first, second := a.storedSnapshot("m1"), a.storedSnapshot("m2")
	size := func(name string) int64 {
		s, err := a.cfg.Repo.Snapshot(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.Size()
	}

	off := newEnv(t, func(c *service.Config) { c.Repo = a.cfg.Repo })
	if _, err := off.svc.Stage(ctx, first); code(err) != "failed_precondition" || !strings.Contains(err.Error(), "--stage-budget") {
		t.Fatalf("staging while off: %v", err)
	}

	// Room for one copy, not two.
	b := newEnv(t, func(c *service.Config) { c.Repo = a.cfg.Repo; c.StageBudget = size(first) + size(second)/2 })
	for name, want := range map[string]string{"../escape": "invalid_argument", "": "invalid_argument", "m9.snap-000000000000": "not_found"} {
		if _, err := b.svc.Stage(ctx, name); code(err) != want {
			t.Errorf("stage %q: %v, want %s", name, err, want)
		}
	}
	tiny := newEnv(t, func(c *service.Config) { c.Repo = a.cfg.Repo; c.StageBudget = 100 })
	if _, err := tiny.svc.Stage(ctx, first); code(err) != "resource_exhausted" || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("a snapshot larger than the budget: %v", err)
	}
	if list, _ := tiny.svc.StagedSnapshots(ctx); len(list) != 0 {
		t.Fatalf("a refused stage left %+v", list)
	}

	if _, err := b.svc.Stage(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Stage(ctx, second); err != nil {
		t.Fatalf("stage of a second snapshot where the first, unused, can make room: %v", err)
	}
	list, _ := b.svc.StagedSnapshots(ctx)
	if len(list) != 1 || list[0].Name != second {
		t.Fatalf("after the second stage: %+v; want only %s", list, second)
	}
	entries, _ := os.ReadDir(filepath.Join(b.cfg.DataDir, "staging"))
	if len(entries) != 0 {
		t.Fatalf("pulls left %d folders in the staging area", len(entries))
	}
}
