package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// crashDuring records in the journal an operation of kind on actor id
// that stopped at step, as a daemon killed there leaves it; args are the
// operation's recorded arguments.
func (e *env) crashDuring(kind, id, step string, to api.State, args map[string]any) {
	e.t.Helper()
	ctx := context.Background()
	j := e.svc.Journal()
	_, err := j.Begin(ctx, journal.Start{Op: journal.Operation{ID: "op-crashed-" + id, Actor: id, Kind: kind}, To: string(to),
		Args: func(journal.Actor) ([]byte, error) { return json.Marshal(args) }})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := j.Step(ctx, "op-crashed-"+id, step); err != nil {
		e.t.Fatal(err)
	}
}

// committed writes a whole snapshot folder (its manifest last).
func committed(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image", "checkpoint.img"), []byte("boot1 5"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a1"}); err != nil {
		t.Fatal(err)
	}
}

// TestReconcileEveryBranch stages what a daemon killed during each kind of
// operation leaves (journal and sandbox) and checks where the next start
// puts the actor.
func TestReconcileEveryBranch(t *testing.T) {
	cases := []struct {
		name    string
		kind    string
		step    string
		during  api.State
		args    func(e *env) map[string]any
		sandbox runtime.Status // "" when there is none
		commit  bool
		want    api.State
		reason  string
		// keepsSandbox: the sandbox is there after the start.
		keepsSandbox bool
	}{
		{"run, sandbox running", "run", "probe", api.Creating, nil, runtime.StatusRunning, false, api.Running, "was running and is kept", true},
		{"run, no sandbox", "run", "boot", api.Creating, nil, "", false, api.Crashed, "did not start", false},
		{"pause committed", "pause", "stop", api.Pausing, newSnap, runtime.StatusRunning, true, api.Paused, "was committed", false},
		{"pause not committed, running", "pause", "checkpoint", api.Pausing, newSnap, runtime.StatusRunning, false, api.Running, "rolled back", true},
		{"pause not committed, paused", "pause", "copy", api.Pausing, newSnap, runtime.StatusPaused, false, api.Running, "rolled back", true},
		{"pause not committed, gone", "pause", "checkpoint", api.Pausing, newSnap, "", false, api.Crashed, "no new snapshot", false},
		{"suspend committed, not stored", "suspend", "push", api.Suspending, newSnap, runtime.StatusStopped, true, api.Suspended, "on this node only", false},
		{"suspend of a paused actor", "suspend", "push", api.Suspending, func(e *env) map[string]any { return map[string]any{"previous": "PAUSED"} }, "", false, api.Suspended, "stasisd stopped during suspend", false},
		{"golden committed", "golden", "commit:after", api.Suspending, newSnap, runtime.StatusRunning, true, api.Suspended, "was committed", false},
		{"resume, restored and running", "resume", "gpu-resume", api.Resuming, func(e *env) map[string]any { return map[string]any{"previous": "PAUSED"} }, runtime.StatusRunning, false, api.Running, "resume was finished", true},
		{"resume, no sandbox", "resume", "restore", api.Resuming, func(e *env) map[string]any { return map[string]any{"previous": "SUSPENDED"} }, "", false, api.Suspended, "rolled back", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.template("t", nil)
			e.run("a1")
			args := map[string]any{}
			if c.args != nil {
				args = c.args(e)
			}
			if c.commit {
				committed(t, args["dir"].(string))
			} else if dir, ok := args["dir"].(string); ok {
				// A partial snapshot: files, no manifest.
				if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			e.crashDuring(c.kind, "a1", c.step, c.during, args)
			id := e.actor("a1").Sandbox
			sb, _ := e.rt.Sandbox(id)
			if c.sandbox == "" {
				e.rt.Put(id, nil)
			} else {
				sb.Status = c.sandbox
				e.rt.Put(id, &sb)
			}
			e.restart()
			a := e.actor("a1")
			if a.State != c.want || a.Operation != nil || !strings.Contains(a.Reason, c.reason) {
				t.Fatalf("after a crash in %s at %s: %+v", c.kind, c.step, a)
			}
			if s, ok := e.rt.Sandbox(id); ok != c.keepsSandbox || ok && s.Status != runtime.StatusRunning {
				t.Fatalf("sandbox after the start: %+v (there: %v, want %v and running)", s, ok, c.keepsSandbox)
			}
			if dir, ok := args["dir"].(string); ok && !c.commit {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the partial snapshot %s is left: %v", dir, err)
				}
			}
			if c.commit && (a.Snapshot == nil || a.Snapshot.ID != args["snapshot"]) && c.kind != "golden" {
				t.Fatalf("the committed snapshot was not adopted: %+v", a.Snapshot)
			}
		})
	}
}

// newSnap is the arguments of an operation snapshotting a running actor.
func newSnap(e *env) map[string]any { return snapArgs(e, "snap-staged") }

func snapArgs(e *env, id string) map[string]any {
	return map[string]any{"previous": "RUNNING", "snapshot": id, "dir": filepath.Join(e.cfg.DataDir, "snapshots", id)}
}

// TestReconcileDelete: a delete cut short is finished, whatever it left.
func TestReconcileDelete(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	id := e.actor("a1").Sandbox
	e.crashDuring("delete", "a1", "stop", api.Deleting, map[string]any{"previous": "RUNNING"})
	e.restart()
	if _, err := e.svc.Actor(context.Background(), "a1"); code(err) != "not_found" {
		t.Fatalf("the actor whose delete was cut short: %v", err)
	}
	if _, ok := e.rt.Sandbox(id); ok {
		t.Fatal("its sandbox is left")
	}
}

// TestReconcileAlwaysStarts: an actor whose sandbox the runtime cannot
// describe (a half-deleted runsc container) goes back to where it stood
// with the reason, its sandbox untouched (an unknown answer is not "gone");
// one whose operation is of a kind this build does not know ends CRASHED
// with the reason; the others are settled and the service starts.
func TestReconcileAlwaysStarts(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	for _, id := range []string{"broken", "unknown", "fine"} {
		e.run(id)
	}
	e.crashDuring("suspend", "broken", "delete", api.Suspending, snapArgs(e, "snap-broken"))
	e.crashDuring("warp", "unknown", "x", api.Suspending, nil)
	e.crashDuring("pause", "fine", "checkpoint", api.Pausing, snapArgs(e, "snap-fine"))
	broken := e.actor("broken").Sandbox
	e.rt.Hook = func(_ context.Context, method, id string) error {
		if method == "State" && id == broken {
			return errors.New("runsc state broken: loading container: open /x/broken_sandbox:broken.lock: permission denied")
		}
		return nil
	}
	e.restart()
	for id, want := range map[string]string{"broken": "could not say where sandbox", "unknown": "unknown operation kind", "fine": "rolled back"} {
		a := e.actor(id)
		if a.Operation != nil || a.State.Transitional() || !strings.Contains(a.Reason, want) {
			t.Errorf("%s after the start: %+v; want a stable state saying %q", id, a, want)
		}
	}
	if a := e.actor("broken"); a.State != api.Running {
		t.Errorf("broken after the start: %+v; want it back RUNNING, where the suspend found it", a)
	}
	e.rt.Hook = nil
	if _, ok := e.rt.Sandbox(broken); !ok {
		t.Error("the sandbox whose state was unknown was removed")
	}
}
