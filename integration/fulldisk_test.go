package integration

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/testkit/testdisk"
)

// TestFullDiskAtRandomPoints: the data folder's disk (journal, actors'
// folders, runsc's state, the local store) fills at a random moment of a
// pause, a resume, a suspend or an rm, as another process on the node
// filling it would, STASIS_FULLDISK_OPS times (12 by default; the seed is
// logged and STASIS_FULLDISK_SEED repeats a run). Whatever each operation
// answers, it returns; the actor is left in a stable state, never
// SUSPENDING or another transitional one, with no operation held; once
// there is room again the next request goes through, and the actor's state
// reads true: a RUNNING one counts on from where it was, a PAUSED or
// SUSPENDED one resumes with its count. An rm that could not finish may
// leave it CRASHED ("run it again"); nothing else may.
func TestFullDiskAtRandomPoints(t *testing.T) {
	ops := envInt(t, "STASIS_FULLDISK_OPS", 12)
	seed := uint64(time.Now().UnixNano())
	if os.Getenv("STASIS_FULLDISK_SEED") != "" {
		seed = uint64(envInt(t, "STASIS_FULLDISK_SEED", 1))
	}
	t.Logf("seed %d (STASIS_FULLDISK_SEED repeats it)", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	d := newDaemon(t)
	testdisk.Tmpfs(t, d.data, "128m")
	d.start("")
	d.template("counter", nil)
	ctx := context.Background()
	filler := filepath.Join(d.data, "filler")
	d.run("counter", "a1")
	want := d.counter("a1", "incr")
	state := api.Running
	outcomes := map[string]int{}
	for i := range ops {
		var verb string
		switch state {
		case api.Running:
			verb = []string{"Pause", "Suspend", "Delete"}[rng.IntN(3)]
		case api.Paused, api.Suspended:
			verb = []string{"Resume", "Resume", "Resume", "Delete"}[rng.IntN(4)]
		}
		// At a random moment of the operation (pause, suspend and resume
		// take half a second or so here, rm less), the disk fills.
		delay := time.Duration(rng.IntN(700)) * time.Millisecond
		filled := make(chan error, 1)
		timer := time.AfterFunc(delay, func() { filled <- testdisk.Filler(filler) })
		_, opErr := call(ctx, d.api, verb, "a1")
		if timer.Stop() {
			// The operation ended first: the disk fills now, and its
			// end, recorded already, must hold.
			filled <- testdisk.Filler(filler)
		}
		if err := <-filled; err != nil {
			t.Fatal(err)
		}
		result := "ok"
		if opErr != nil {
			result = errdefs.Code(opErr)
		}
		outcomes[verb+" "+result]++
		t.Logf("%d: %s with the disk filled after %s: %v", i, verb, delay, opErr)

		// With the disk still full: a stable state, no operation held.
		a, err := d.api.InspectActor(ctx, "a1")
		switch {
		case verb == "Delete" && opErr == nil:
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("%d: after an rm that succeeded: %+v %v", i, a, err)
			}
		case err != nil:
			t.Fatalf("%d: inspect after %s on a full disk: %v", i, verb, err)
		case a.State.Transitional() || a.Operation != nil:
			t.Fatalf("%d: %s on a full disk left the actor %s, operation %+v (%s)", i, verb, a.State, a.Operation, a.Reason)
		case a.State == api.Crashed && verb != "Delete":
			t.Fatalf("%d: %s on a full disk left the actor CRASHED: %s", i, verb, a.Reason)
		case a.State != api.Running && a.State != api.Paused && a.State != api.Suspended && a.State != api.Crashed:
			t.Fatalf("%d: %s on a full disk left the actor %s (%s)", i, verb, a.State, a.Reason)
		}

		// Room again: the next request goes through, and the state reads
		// true.
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		removed := verb == "Delete" && opErr == nil
		switch {
		case a.State == api.Crashed && !removed:
			if _, err := d.api.Delete(ctx, api.DeleteRequest{ID: "a1"}); err != nil {
				t.Fatalf("%d: rm again once there is room: %v", i, err)
			}
			removed = true
		case a.State == api.Running && !removed:
			if got := d.counter("a1", "get"); got != want {
				t.Fatalf("%d: after %s on a full disk the actor RUNNING counts %q; want %q", i, verb, got, want)
			}
			want = d.counter("a1", "incr")
		}
		// PAUSED or SUSPENDED: its count is checked once a resume goes
		// through, the next turn's or the last.
		state = a.State
		if removed {
			d.requireNoSandbox("a1")
			d.run("counter", "a1")
			want, state = d.counter("a1", "incr"), api.Running
		}
	}
	t.Logf("outcomes: %v", outcomes)
	if state != api.Running {
		d.op("Resume", "a1")
		if got := d.counter("a1", "get"); got != want {
			t.Fatalf("resumed at the end, the actor counts %q; want %q", got, want)
		}
	}
	d.op("Delete", "a1")
	d.requireNoSandbox("a1")
}
