package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func open(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func TestOperationsAreExclusiveAndReplayable(t *testing.T) {
	ctx := context.Background()
	j := open(t, filepath.Join(t.TempDir(), "journal.db"))
	run := Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "run", RequestID: "r1"}, To: "CREATING", Create: &Actor{ID: "a1", Template: "t", Sandbox: "a1"}}
	if _, replay, err := j.Begin(ctx, run); err != nil || replay {
		t.Fatalf("begin: %v %v", replay, err)
	}
	// A second operation while the first runs names the first.
	_, _, err := j.Begin(ctx, Start{Op: Operation{ID: "op2", Actor: "a1", Kind: "suspend"}, From: []string{"RUNNING"}, To: "SUSPENDING"})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Op.ID != "op1" || !errors.Is(err, ErrBusy) {
		t.Fatalf("got %v; want busy with op1", err)
	}
	if err := j.Step(ctx, "op1", "create"); err != nil {
		t.Fatal(err)
	}
	if ops, _ := j.Running(ctx); len(ops) != 1 || ops[0].Step != "create" {
		t.Fatalf("running %+v", ops)
	}
	if err := j.End(ctx, "op1", OpDone, "", "a1", "RUNNING", ""); err != nil {
		t.Fatal(err)
	}
	// The same request again is a replay of op1, not a new operation.
	op, replay, err := j.Begin(ctx, Start{Op: Operation{ID: "op3", Actor: "a1", Kind: "run", RequestID: "r1"}, To: "CREATING", Create: &Actor{ID: "a1"}})
	if err != nil || !replay || op.ID != "op1" || op.State != OpDone {
		t.Fatalf("replay: %+v %v %v", op, replay, err)
	}
	// A state the operation does not start from is refused with both.
	_, _, err = j.Begin(ctx, Start{Op: Operation{ID: "op4", Actor: "a1", Kind: "resume"}, From: []string{"SUSPENDED", "PAUSED"}, To: "RESUMING"})
	var state *StateError
	if !errors.As(err, &state) || !strings.Contains(err.Error(), "actor a1 is RUNNING; resume needs it SUSPENDED or PAUSED") {
		t.Fatalf("got %v", err)
	}
	if _, _, err := j.Begin(ctx, Start{Op: Operation{ID: "op5", Actor: "nobody", Kind: "pause"}, To: "PAUSING"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown actor: %v", err)
	}
	if _, _, err := j.Begin(ctx, run); err != nil {
		t.Fatalf("replayed create: %v", err)
	}
	if _, _, err := j.Begin(ctx, Start{Op: Operation{ID: "op6", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1"}}); !errors.Is(err, ErrExists) {
		t.Fatalf("second actor a1: %v", err)
	}
}

// TestSurvivesReopen: what was committed is there after the file is
// closed and opened again, as after a crash.
func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.PutTemplate(ctx, Template{Name: "t", Spec: []byte(`{"gpus":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := j.PutTemplate(ctx, Template{Name: "t"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate template: %v", err)
	}
	if _, _, err := j.Begin(ctx, Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1", Template: "t"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Step(ctx, "op1", "boot"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.AddEvent(ctx, Event{Actor: "a1", Operation: "op1", Step: "boot", Message: "started"}); err != nil {
		t.Fatal(err)
	}
	if err := j.PutSnapshot(ctx, Snapshot{ID: "s1", Actor: "a1", Template: "t", Kind: "pause", Scope: "Full", Dir: "/x", Size: 10}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, path)
	ops, err := j.Running(ctx)
	if err != nil || len(ops) != 1 || ops[0].Step != "boot" {
		t.Fatalf("running after reopen: %+v %v", ops, err)
	}
	if tpl, err := j.Template(ctx, "t"); err != nil || string(tpl.Spec) != `{"gpus":1}` {
		t.Fatalf("template %+v %v", tpl, err)
	}
	if ev, err := j.Events(ctx, "a1", 0); err != nil || len(ev) != 1 || ev[0].Message != "started" {
		t.Fatalf("events %+v %v", ev, err)
	}
	if s, err := j.Snapshot(ctx, "s1"); err != nil || s.Size != 10 {
		t.Fatalf("snapshot %+v %v", s, err)
	}
	if err := j.DeleteActor(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Actor(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted actor: %v", err)
	}
}

func TestRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte("this is not a database, not even close to one; it is longer than a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), junk); err == nil || !strings.Contains(err.Error(), junk) {
		t.Fatalf("opening a text file: %v", err)
	}
	path := filepath.Join(dir, "old.db")
	j := open(t, path)
	if _, err := j.db.Exec(`UPDATE meta SET value = '99' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := Open(context.Background(), path); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Fatalf("opening a newer journal: %v", err)
	}
}
