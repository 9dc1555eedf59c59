package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/transfer"
)

// TestCrashAtEveryStep kills stasisd with SIGKILL before and after each
// step of each operation (a failpoint armed by STASIS_FAILPOINT), restarts
// it, and checks what reconciliation left: no actor in a transitional
// state, no workload frozen (a running actor answers with its counter
// intact), a paused or suspended one resumes with it, a crashed one says
// why.
func TestCrashAtEveryStep(t *testing.T) {
	// disk: the pause before a resume stops its sandbox (--keep-paused
	// never), so that the resume restores the snapshot from disk; the
	// others resume the sandbox the pause kept frozen.
	cells := []struct {
		failpoint, verb string
		disk            bool
	}{
		{service.Failpoint(service.KindRun, service.StepBundle, true), "Run", false},
		{service.Failpoint(service.KindRun, engine.StepBoot, true), "Run", false},
		{service.Failpoint(service.KindRun, engine.StepProbe, false), "Run", false},
		{service.Failpoint(service.KindPause, engine.StepPreflight, false), "Pause", false},
		{service.Failpoint(service.KindPause, engine.StepCheckpoint, false), "Pause", false},
		{service.Failpoint(service.KindPause, engine.StepCommit, true), "Pause", false},
		{service.Failpoint(service.KindPause, engine.StepFreeze, true), "Pause", false},
		{service.Failpoint(service.KindSuspend, engine.StepCheckpoint, false), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepCheckpoint, true), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepCommit, false), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepCommit, true), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepStop, false), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepStop, true), "Suspend", false},
		{service.Failpoint(service.KindSuspend, engine.StepDelete, true), "Suspend", false},
		{service.Failpoint(service.KindSuspend, transfer.StepPush, false), "Suspend", false},
		{service.Failpoint(service.KindSuspend, transfer.StepPush, true), "Suspend", false},
		{service.Failpoint(service.KindResume, engine.StepVerify, false), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepCompatibility, true), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepRestore, false), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepRestore, true), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepProbe, false), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepProbe, true), "Resume", true},
		{service.Failpoint(service.KindResume, engine.StepCompatibility, true), "Resume", false},
		{service.Failpoint(service.KindResume, engine.StepUnpause, false), "Resume", false},
		{service.Failpoint(service.KindResume, engine.StepUnpause, true), "Resume", false},
		{service.Failpoint(service.KindDelete, engine.StepStop, false), "Delete", false},
		{service.Failpoint(service.KindDelete, engine.StepStop, true), "Delete", false},
		{service.Failpoint(service.KindDelete, service.StepRemoveFiles, true), "Delete", false},
	}
	for _, c := range cells {
		name := strings.ReplaceAll(c.failpoint, "/", "_")
		if c.disk {
			name += "_from_disk"
		}
		t.Run(name, func(t *testing.T) {
			var flags []string
			if c.disk {
				flags = []string{"--keep-paused", "never"}
			}
			d := newDaemon(t, flags...)
			d.start("")
			d.template("counter", nil)
			var inst string
			value := 0
			if c.verb != "Run" {
				d.run("counter", "a1")
				inst, _, _ = strings.Cut(d.counter("a1", "incr"), " ")
				value = 1
				if c.verb == "Resume" {
					d.op("Pause", "a1")
				}
			}
			d.stop()

			d.start(c.failpoint)
			ctx := context.Background()
			var err error
			if c.verb == "Run" {
				_, err = d.api.Run(ctx, api.RunRequest{Template: "counter", ID: "a1"})
			} else {
				_, err = call(ctx, d.api, c.verb, "a1")
			}
			if err == nil {
				t.Fatalf("%s answered although stasisd should have died at %s", c.verb, c.failpoint)
			}
			d.crashed()

			d.start("")
			a, err := d.api.InspectActor(ctx, "a1")
			if c.verb == "Delete" && err != nil {
				var apiErr *api.Error
				if !errors.As(err, &apiErr) || apiErr.Code != "not_found" {
					t.Fatalf("after a crash in delete: %v", err)
				}
				d.requireNoSandbox("a1")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("after a crash at %s: %s (%s)", c.failpoint, a.State, a.Reason)
			if a.State.Transitional() || a.Operation != nil {
				t.Fatalf("actor left %s with operation %+v", a.State, a.Operation)
			}
			if a.Reason == "" && c.verb != "Run" {
				t.Errorf("no reason given for %s after the crash", a.State)
			}
			if c.failpoint == "suspend/push:after" && (a.Snapshot == nil || a.Snapshot.Stored == "") {
				t.Errorf("the push finished before the crash, and the snapshot is not recorded as stored: %+v", a.Snapshot)
			}
			switch a.State {
			case api.Running:
			case api.Paused, api.Suspended:
				d.op("Resume", "a1")
			case api.Crashed:
				if a.Snapshot == nil {
					if c.verb != "Run" {
						t.Fatalf("CRASHED without a snapshot after a crash in %s: %s", c.verb, a.Reason)
					}
					d.requireNoSandbox("a1")
					d.op("Delete", "a1")
					return
				}
				d.op("Resume", "a1")
			default:
				t.Fatalf("unexpected state %s", a.State)
			}
			got := d.counter("a1", "incr")
			if c.verb == "Run" {
				if !strings.HasSuffix(got, " 1") {
					t.Fatalf("a fresh actor counts %q", got)
				}
			} else if want := inst + " " + string(rune('0'+value+1)); got != want {
				t.Fatalf("counter %q, want %q: the workload's state was not kept", got, want)
			}
			d.op("Delete", "a1")
			d.requireNoSandbox("a1")
		})
	}
}

// TestSandboxVanishedWhileDown: a sandbox removed behind stasisd's back
// makes its actor CRASHED with the reason at the next start; it resumes from
// its last snapshot.
func TestSandboxVanishedWhileDown(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	d.op("Pause", "a1")
	d.op("Resume", "a1")
	d.counter("a1", "incr")
	d.stop()
	if err := d.rt.Stop(context.Background(), api.SandboxID("a1")); err != nil {
		t.Fatal(err)
	}
	if err := d.rt.Delete(context.Background(), api.SandboxID("a1")); err != nil {
		t.Fatal(err)
	}
	d.start("")
	a := d.inspect("a1")
	if a.State != api.Crashed || !strings.Contains(a.Reason, "vanished") || a.Snapshot == nil {
		t.Fatalf("after its sandbox vanished: %+v", a)
	}
	if a.ExitCode != api.ExitUnknown || a.ExitedAt.IsZero() {
		t.Fatalf("an end found at start is an end, how unknown: %+v", a)
	}
	d.op("Resume", "a1")
	// The pause snapshot held the counter at 1.
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("resumed from the last snapshot, the counter says %q", got)
	}
}

// TestProcessEndedWhileDownIsRestarted: the process of an actor whose
// template says restart always, ended while stasisd was down, is booted
// again when stasisd starts, as docker restarts such containers at its
// start; one whose policy is never stays CRASHED.
func TestProcessEndedWhileDownIsRestarted(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("always", func(tpl *api.Template) { tpl.Restart = api.RestartAlways })
	d.template("never", nil)
	d.run("always", "a1")
	d.run("never", "a2")
	first, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	d.stop()
	for _, id := range []string{"a1", "a2"} {
		if err := d.rt.Stop(context.Background(), api.SandboxID(id)); err != nil {
			t.Fatal(err)
		}
	}
	d.start("")
	waitFor(t, "a1 to be restarted", func() bool {
		a := d.inspect("a1")
		return a.State == api.Running && a.Operation == nil && strings.Contains(a.Reason, "restarted by its restart policy (always)")
	})
	if got := d.counter("a1", "get"); strings.HasPrefix(got, first+" ") || !strings.HasSuffix(got, " 0") {
		t.Fatalf("restarted at stasisd's start, a1's counter says %q (before: %s 1): want a new process at 0", got, first)
	}
	if a := d.inspect("a2"); a.State != api.Crashed || a.ExitCode != api.ExitUnknown {
		t.Fatalf("a2 (restart never) after its process ended while stasisd was down: %+v", a)
	}
}

// TestRacingOperations: while a suspend runs, a pause of the same actor is
// refused with the operation it is busy with; the suspend is unharmed.
func TestRacingOperations(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	ctx := context.Background()
	var wg sync.WaitGroup
	var suspendErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, suspendErr = call(ctx, d.api, "Suspend", "a1")
	}()
	// Wait for the journal to show the suspend in flight.
	for {
		a, err := d.api.InspectActor(ctx, "a1")
		if err != nil {
			t.Fatal(err)
		}
		if a.Operation != nil || a.State == api.Suspended {
			break
		}
	}
	_, err := call(ctx, d.api, "Pause", "a1")
	wg.Wait()
	if suspendErr != nil {
		t.Fatal(suspendErr)
	}
	var apiErr *api.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == "aborted" && strings.Contains(apiErr.Message, "busy with suspend"):
	case errors.As(err, &apiErr) && apiErr.Code == "failed_precondition" && strings.Contains(apiErr.Message, "SUSPENDED"):
		t.Log("the suspend ended before the pause arrived; the pause was refused for the state")
	default:
		t.Fatalf("a pause racing a suspend: %v", err)
	}
	if a := d.inspect("a1"); a.State != api.Suspended {
		t.Fatalf("after the race: %+v", a)
	}
}

// TestRetriedRequestIsIdempotent: the same request id answers with the
// first request's result, and does the work once.
func TestRetriedRequestIsIdempotent(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	ctx := context.Background()
	req := api.RunRequest{Template: "counter", ID: "a1", RequestID: "req-1"}
	first, err := d.api.Run(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.api.Run(ctx, req)
	if err != nil || again.ID != first.ID || again.State != api.Running {
		t.Fatalf("retried run: %+v %v", again, err)
	}
	pause := api.OpRequest{ID: "a1", RequestID: "req-2"}
	if _, err := d.api.Pause(ctx, pause); err != nil {
		t.Fatal(err)
	}
	if a, err := d.api.Pause(ctx, pause); err != nil || a.State != api.Paused {
		t.Fatalf("retried pause: %+v %v", a, err)
	}
	events, err := d.api.Events(ctx, "a1", 0)
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]bool{}
	for _, e := range events.Events {
		ops[e.Operation] = true
	}
	if len(ops) != 2 {
		t.Fatalf("%d operations ran for two requests sent twice each", len(ops))
	}
	// A new request id is a new pause, refused for the state.
	if _, err := d.api.Pause(ctx, api.OpRequest{ID: "a1", RequestID: "req-3"}); err == nil || !strings.Contains(err.Error(), "actor a1 is PAUSED; pause needs it RUNNING") {
		t.Fatalf("a new pause of a paused actor: %v", err)
	}
}

// TestDeleteFromEveryState deletes actors that are running, paused,
// suspended and crashed: each sandbox and folder goes.
func TestDeleteFromEveryState(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	for _, id := range []string{"running", "paused", "suspended", "crashed"} {
		d.run("counter", id)
	}
	d.op("Pause", "paused")
	d.op("Suspend", "suspended")
	d.stop()
	if err := d.rt.Stop(context.Background(), api.SandboxID("crashed")); err != nil {
		t.Fatal(err)
	}
	d.start("")
	want := map[string]api.State{"running": api.Running, "paused": api.Paused, "suspended": api.Suspended, "crashed": api.Crashed}
	for id, state := range want {
		if a := d.inspect(id); a.State != state {
			t.Fatalf("%s is %s", id, a.State)
		}
		if _, err := d.api.Delete(context.Background(), api.DeleteRequest{ID: id, Purge: id == "suspended"}); err != nil {
			t.Fatalf("delete %s: %v", id, err)
		}
		d.requireNoSandbox(id)
	}
	if actors, err := d.api.ListActors(context.Background()); err != nil || len(actors) != 0 {
		t.Fatalf("actors left: %+v %v", actors, err)
	}
	if snaps, err := d.api.ListSnapshots(context.Background(), ""); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots left after deleting (the stored one purged): %+v %v", snaps, err)
	}
}
