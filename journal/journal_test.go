package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/testkit/testdisk"
)

func open(t *testing.T, path string) *Journal {
	t.Helper()
	j, err := Open(context.Background(), path, Options{Reserve: -1})
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
	if b, err := j.Begin(ctx, run); err != nil || b.Replay || b.Actor.State != "CREATING" {
		t.Fatalf("begin: %+v %v", b, err)
	}
	// A second operation while the first runs names the first.
	_, err := j.Begin(ctx, Start{Op: Operation{ID: "op2", Actor: "a1", Kind: "suspend"}, From: []string{"RUNNING"}, To: "SUSPENDING"})
	var busy *BusyError
	if !errors.As(err, &busy) || busy.Op.ID != "op1" || !errors.Is(err, ErrBusy) || errdefs.Code(err) != "aborted" {
		t.Fatalf("got %v; want busy with op1", err)
	}
	if err := j.Step(ctx, "op1", "create"); err != nil {
		t.Fatal(err)
	}
	if ops, _ := j.Running(ctx); len(ops) != 1 || ops[0].Step != "create" {
		t.Fatalf("running %+v", ops)
	}
	if a, err := j.Actor(ctx, "a1"); err != nil || a.Running == nil || a.Running.ID != "op1" || a.Running.Step != "create" {
		t.Fatalf("the actor does not show its running operation: %+v %v", a, err)
	}
	a, err := j.End(ctx, End{OpID: "op1", State: OpDone, Actor: "a1", ActorState: "RUNNING"})
	if err != nil || a.State != "RUNNING" || a.Running != nil {
		t.Fatalf("end: %+v %v", a, err)
	}
	// The same request again is a replay of op1, not a new operation.
	b, err := j.Begin(ctx, Start{Op: Operation{ID: "op3", Actor: "a1", Kind: "run", RequestID: "r1"}, To: "CREATING", Create: &Actor{ID: "a1"}})
	if err != nil || !b.Replay || b.Op.ID != "op1" || b.Op.State != OpDone {
		t.Fatalf("replay: %+v %v", b, err)
	}
	// A state the operation does not start from is refused with both.
	_, err = j.Begin(ctx, Start{Op: Operation{ID: "op4", Actor: "a1", Kind: "resume"}, From: []string{"SUSPENDED", "PAUSED"}, To: "RESUMING"})
	var state *StateError
	if !errors.As(err, &state) || !strings.Contains(err.Error(), "actor a1 is RUNNING; resume needs it SUSPENDED or PAUSED") || errdefs.Code(err) != "failed_precondition" {
		t.Fatalf("got %v", err)
	}
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op5", Actor: "nobody", Kind: "pause"}, To: "PAUSING"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown actor: %v", err)
	}
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op6", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1"}}); !errors.Is(err, ErrExists) {
		t.Fatalf("second actor a1: %v", err)
	}
}

// TestRequestIDIsCheckedBeforeState: a retry of a request that succeeded
// answers with the first result although the actor has moved on, and a
// retry while the first runs is a replay, not a busy refusal.
func TestRequestIDIsCheckedBeforeState(t *testing.T) {
	ctx := context.Background()
	j := open(t, filepath.Join(t.TempDir(), "journal.db"))
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.End(ctx, End{OpID: "op1", State: OpDone, Actor: "a1", ActorState: "PAUSED"}); err != nil {
		t.Fatal(err)
	}
	resume := Start{Op: Operation{ID: "op2", Actor: "a1", Kind: "resume", RequestID: "r2"}, From: []string{"PAUSED"}, To: "RESUMING",
		Args: func(before Actor) ([]byte, error) { return []byte(`{"previous":"` + before.State + `"}`), nil }}
	b, err := j.Begin(ctx, resume)
	if err != nil || b.Actor.State != "PAUSED" || string(b.Op.Args) != `{"previous":"PAUSED"}` {
		t.Fatalf("begin: %+v %v", b, err)
	}
	resume.Op.ID = "op3"
	if again, err := j.Begin(ctx, resume); err != nil || !again.Replay || again.Op.ID != "op2" || again.Op.State != OpRunning {
		t.Fatalf("the same request while it runs: %+v %v", again, err)
	}
	if _, err := j.End(ctx, End{OpID: "op2", State: OpFailed, Error: "no space", ErrorCode: "resource_exhausted", Actor: "a1", ActorState: "RUNNING"}); err != nil {
		t.Fatal(err)
	}
	if again, err := j.Begin(ctx, resume); err != nil || !again.Replay || again.Op.ErrorCode != "resource_exhausted" || again.Op.Error != "no space" {
		t.Fatalf("the same request after it ended, the actor RUNNING: %+v %v", again, err)
	}
}

// TestSurvivesReopen: what was committed is there after the file is
// closed and opened again, as after a crash.
func TestSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.PutTemplate(ctx, Template{Name: "t", Spec: []byte(`{"gpus":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := j.PutTemplate(ctx, Template{Name: "t"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate template: %v", err)
	}
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1", Template: "t"}}); err != nil {
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
	if ev, last, err := j.Events(ctx, "a1", 0, 0); err != nil || len(ev) != 1 || ev[0].Message != "started" || last != ev[0].Seq {
		t.Fatalf("events %+v %d %v", ev, last, err)
	}
	if s, err := j.Snapshot(ctx, "s1"); err != nil || s.Size != 10 {
		t.Fatalf("snapshot %+v %v", s, err)
	}
	if err := j.DeleteTemplate(ctx, "t"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "a1") {
		t.Fatalf("deleting a template an actor uses: %v", err)
	}
	if err := j.DeleteActor(ctx, "a1", "op1"); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Actor(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted actor: %v", err)
	}
	if op, err := j.Operation(ctx, "op1"); err != nil || op.Actor != "a1" {
		t.Fatalf("the operation kept for replays: %+v %v", op, err)
	}
	if err := j.DeleteTemplate(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := j.DeleteTemplate(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting a deleted template: %v", err)
	}
}

// TestSnapshotKindChangeIsKept: a pause snapshot that is stored becomes a
// commit in the record (the upsert once dropped the kind).
func TestSnapshotKindChangeIsKept(t *testing.T) {
	ctx := context.Background()
	j := open(t, filepath.Join(t.TempDir(), "journal.db"))
	s := Snapshot{ID: "s1", Actor: "a1", Template: "t", Kind: "pause", Scope: "Full", Dir: "/x"}
	if err := j.PutSnapshot(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Kind, s.Stored = "commit", "a1.s1"
	if err := j.PutSnapshot(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got, err := j.Snapshot(ctx, "s1"); err != nil || got.Kind != "commit" || got.Stored != "a1.s1" {
		t.Fatalf("after storing the pause snapshot: %+v %v", got, err)
	}
}

func TestRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte("this is not a database, not even close to one; it is longer than a header"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), junk, Options{}); err == nil || !strings.Contains(err.Error(), junk) {
		t.Fatalf("opening a text file: %v", err)
	}
	path := filepath.Join(dir, "new.db")
	j := open(t, path)
	if _, err := j.db.Exec(`UPDATE meta SET value = '99' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := Open(context.Background(), path, Options{}); err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Fatalf("opening a newer journal: %v", err)
	}
}

// TestUpgradesVersion1: a journal as the first stasisd wrote it (schema 1,
// no error codes, deadlines or runtimes) opens, keeps its records and gets
// the new columns.
func TestUpgradesVersion1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "journal.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// schema is version 1's; the upgrades add the rest.
	for _, stmt := range []string{schema, `INSERT INTO meta(key, value) VALUES ('schema', '1')`,
		`INSERT INTO actors(id, template, state, sandbox, created_at, updated_at) VALUES ('a1', 't', 'PAUSED', 'a1', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`,
		`INSERT INTO operations(id, actor, kind, request_id, state, started_at) VALUES ('op1', 'a1', 'pause', 'r1', 'done', '2026-01-01T00:00:00Z')`,
		// What d.x pushed; what d started from (d.x's); a golden one.
		`INSERT INTO snapshots(id, actor, template, kind, scope, stored, created_at) VALUES
			('snap-5900d77a73d5', 'd.x', 't', 'commit', 'Full', 'd.x.snap-5900d77a73d5', '2026-01-01T00:00:00Z'),
			('snap-000000000001', 'd', 't', 'commit', 'Full', 'd.x.snap-5900d77a73d5', '2026-01-01T00:00:00Z'),
			('golden-t-1', 'warm_t', 't', 'golden', 'Full', 'golden.t.golden-t-1', '2026-01-01T00:00:00Z')`} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	j := open(t, path)
	b, err := j.Begin(ctx, Start{Op: Operation{ID: "op2", Actor: "a1", Kind: "pause", RequestID: "r1"}, From: []string{"RUNNING"}, To: "PAUSING"})
	if err != nil || !b.Replay || b.Op.ID != "op1" || b.Op.ErrorCode != "" {
		t.Fatalf("the upgraded journal's operation: %+v %v", b, err)
	}
	// Every actor before runtimes was gVisor's.
	if a, err := j.Actor(ctx, "a1"); err != nil || a.Runtime != "gvisor" {
		t.Fatalf("the upgraded journal's actor: runtime %q, %v", a.Runtime, err)
	}
	// Who pushed what is recorded from the names stasisd gave before.
	snaps, err := j.Snapshots(ctx, "")
	if err != nil || len(snaps) != 3 {
		t.Fatalf("the upgraded journal's snapshots: %+v %v", snaps, err)
	}
	for _, s := range snaps {
		if want := s.ID != "snap-000000000001"; s.Pushed != want {
			t.Errorf("snapshot %s of %s (stored as %s): pushed %v, want %v", s.ID, s.Actor, s.Stored, s.Pushed, want)
		}
	}
	var v string
	if err := j.db.QueryRow(`SELECT value FROM meta WHERE key = 'schema'`).Scan(&v); err != nil || v != fmt.Sprint(schemaVersion) {
		t.Fatalf("schema version after the upgrade: %q %v", v, err)
	}
}

// TestFilesArePrivate: the journal and its side files are readable by
// their owner only, whatever the umask.
func TestFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	j, err := Open(context.Background(), path, Options{Reserve: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.PutTemplate(context.Background(), Template{Name: "t", Spec: []byte(`{"env":["API_TOKEN=secret"]}`)}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 3 {
		t.Fatalf("expected the journal, its write-ahead log and its reserve: %v", entries)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: readable by others", e.Name(), info.Mode().Perm())
		}
	}
}

// TestEndsAnOperationOnAFullDisk fills the journal's filesystem to the
// last byte and then ends a running operation: the write needs new blocks
// (the write-ahead log was truncated first), fails with SQLITE_FULL, gives
// the reserve up and gets through, so that the actor is not stranded in a
// transitional state. Without a reserve the same end fails, which is what
// stranded actors before. Once there is room again, the reserve is made
// again.
func TestEndsAnOperationOnAFullDisk(t *testing.T) {
	for _, reserve := range []int64{1 << 20, -1} {
		t.Run(fmt.Sprintf("reserve=%d", reserve), func(t *testing.T) {
			j, fill := fullDisk(t, reserve)
			_, err := j.End(context.Background(), End{OpID: "op1", State: OpFailed, Error: "push: no space left on device", Actor: "a1", ActorState: "SUSPENDED"})
			if reserve < 0 {
				if !diskFull(err) {
					t.Fatalf("without a reserve, the end on a full disk: %v; want SQLITE_FULL (else this test proves nothing)", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("the end of the operation on a full disk: %v", err)
			}
			a, err := j.Actor(context.Background(), "a1")
			if err != nil || a.State != "SUSPENDED" || a.Running != nil {
				t.Fatalf("after the end: %+v %v", a, err)
			}
			if j.Reserved() {
				t.Fatal("the reserve is still there although the disk is full")
			}
			if err := os.Remove(fill); err != nil {
				t.Fatal(err)
			}
			if err := j.SetActor(context.Background(), "a1", "SUSPENDED", "disk has room again"); err != nil {
				t.Fatal(err)
			}
			if !j.Reserved() {
				t.Fatal("the reserve was not made again once the disk had room")
			}
		})
	}
}

// fullDisk opens a journal on a small tmpfs with an operation running,
// its write-ahead log truncated, and the filesystem filled to the last
// block by the file it returns.
func fullDisk(t *testing.T, reserve int64) (*Journal, string) {
	dir := t.TempDir()
	testdisk.Tmpfs(t, dir, "8m")
	ctx := context.Background()
	j, err := Open(ctx, filepath.Join(dir, "journal.db"), Options{Reserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	if j.Reserved() != (reserve > 0) {
		t.Fatalf("reserve %d on an empty 8 MiB disk: reserved %v", reserve, j.Reserved())
	}
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "suspend"}, To: "SUSPENDING", Create: &Actor{ID: "a1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	fill := filepath.Join(dir, "filler")
	testdisk.Fill(t, fill)
	return j, fill
}

// TestAdoptSnapshotIsOneWrite: the snapshot's record and the actor's
// latest snapshot are written together or not at all.
func TestAdoptSnapshotIsOneWrite(t *testing.T) {
	ctx := context.Background()
	j := open(t, filepath.Join(t.TempDir(), "journal.db"))
	if _, err := j.Begin(ctx, Start{Op: Operation{ID: "op1", Actor: "a1", Kind: "run"}, To: "CREATING", Create: &Actor{ID: "a1", Template: "t", Sandbox: "+a1+"}}); err != nil {
		t.Fatal(err)
	}
	s := Snapshot{ID: "s1", Actor: "a1", Template: "t", Kind: "commit", Scope: "Full", Dir: "/x", Size: 42}
	if err := j.AdoptSnapshot(ctx, s); err != nil {
		t.Fatal(err)
	}
	if a, err := j.Actor(ctx, "a1"); err != nil || a.Snapshot != "s1" {
		t.Fatalf("the actor after the adoption: %+v %v", a, err)
	}
	if got, err := j.Snapshot(ctx, "s1"); err != nil || got.Size != 42 || got.Dir != "/x" {
		t.Fatalf("the snapshot after the adoption: %+v %v", got, err)
	}
	// An actor that is not there: refused, and no record is left.
	orphan := Snapshot{ID: "s2", Actor: "nobody", Template: "t", Kind: "commit", Scope: "Full"}
	if err := j.AdoptSnapshot(ctx, orphan); !errors.Is(err, ErrNotFound) {
		t.Fatalf("adoption by nobody: %v", err)
	}
	if _, err := j.Snapshot(ctx, "s2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused adoption left its snapshot's record: %v", err)
	}
}
