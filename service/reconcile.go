package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
)

// Reconcile runs when stasisd starts, before it serves: every operation a
// crash interrupted is finished or rolled back from what the journal says
// it was doing and what the runtime says is there, so that each actor ends
// RUNNING, PAUSED, SUSPENDED or CRASHED with the reason. Then every stable
// actor is checked against its sandbox: a RUNNING actor whose sandbox
// vanished is CRASHED, a leftover sandbox of a stopped actor is removed.
func (s *Service) Reconcile(ctx context.Context) error {
	ops, err := s.journal.Running(ctx)
	if err != nil {
		return err
	}
	for _, rec := range ops {
		if err := s.recover(ctx, rec); err != nil {
			return fmt.Errorf("reconcile %s %s (operation %s): %w", rec.Kind, rec.Actor, rec.ID, err)
		}
	}
	actors, err := s.journal.Actors(ctx)
	if err != nil {
		return err
	}
	for _, a := range actors {
		if err := s.check(ctx, a); err != nil {
			return fmt.Errorf("reconcile actor %s: %w", a.ID, err)
		}
	}
	return nil
}

func (s *Service) recover(ctx context.Context, rec journal.Operation) error {
	var args opArgs
	if err := json.Unmarshal(rec.Args, &args); err != nil {
		return fmt.Errorf("operation arguments: %w", err)
	}
	o := &operation{id: rec.ID, actor: rec.Actor, kind: rec.Kind, args: args}
	a, err := s.journal.Actor(ctx, rec.Actor)
	if errors.Is(err, journal.ErrNotFound) {
		// A delete that had already forgotten the actor.
		return s.journal.End(ctx, rec.ID, journal.OpDone, "", rec.Actor, "", "")
	}
	if err != nil {
		return err
	}
	st, err := s.sandboxState(ctx, a.Sandbox)
	if err != nil {
		return err
	}
	at := fmt.Sprintf("stasisd stopped during %s at step %q", rec.Kind, rec.Step)
	s.event(ctx, a.ID, rec.ID, "reconcile", at+"; sandbox "+string(st), 0, nil)
	var out outcome
	switch rec.Kind {
	case "run":
		out = s.recoverRun(ctx, o, a, st, at)
	case "pause", "suspend", "golden":
		out, err = s.recoverSnapshot(ctx, o, a, st, at)
	case "resume":
		out = s.recoverResume(ctx, o, a, st, at)
	case "delete":
		if err := s.finishDelete(ctx, o, a.Sandbox, args.Purge); err != nil {
			out = outcome{state: Crashed, reason: fmt.Sprintf("%s; the delete could not be finished, run it again: %v", at, err)}
		} else {
			out = outcome{deleted: true}
		}
	default:
		out = outcome{state: Crashed, reason: at + ": unknown operation kind"}
	}
	if err != nil {
		return err
	}
	state := string(out.state)
	if out.deleted {
		state = ""
	}
	s.event(ctx, a.ID, rec.ID, "reconcile", fmt.Sprintf("ended %s", orDeleted(out)), 0, nil)
	return s.journal.End(ctx, rec.ID, journal.OpFailed, at, a.ID, state, out.reason)
}

func orDeleted(out outcome) string {
	if out.deleted {
		return "deleted"
	}
	return string(out.state) + ": " + out.reason
}

// thaw makes sure a sandbox that may have been cut off mid-step runs: a
// paused sandbox (a Data snapshot pauses it) is resumed, and the GPU state
// of a GPU actor is put back (a no-op when nothing is checkpointed).
func (s *Service) thaw(ctx context.Context, o *operation, a journal.Actor, st runtime.Status) error {
	if st == runtime.StatusPaused {
		if err := s.rt.Unpause(ctx, a.Sandbox); err != nil {
			return fmt.Errorf("resume the paused sandbox: %w", err)
		}
	}
	t, err := s.Template(ctx, a.Template)
	if err != nil {
		return err
	}
	if t.GPUs == 0 {
		return nil
	}
	s.mu.Lock()
	s.current[a.Sandbox] = o
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.current, a.Sandbox)
		s.mu.Unlock()
	}()
	return s.cfg.Engine.ThawGPU(ctx, s.engineActor(t, a.ID), a.Sandbox)
}

func (s *Service) recoverRun(ctx context.Context, o *operation, a journal.Actor, st runtime.Status, at string) outcome {
	if st == runtime.StatusRunning || st == runtime.StatusPaused {
		// It may have been restored from a golden snapshot with its GPU
		// state still in host memory.
		if err := s.thaw(ctx, o, a, st); err == nil {
			return outcome{state: Running, reason: at + "; the sandbox was running and is kept"}
		}
	}
	_ = s.rt.Delete(ctx, a.Sandbox)
	return outcome{state: Crashed, reason: at + "; the actor did not start: delete it and run it again"}
}

// recoverSnapshot finishes a pause, suspend or golden whose snapshot was
// committed, and rolls back one whose snapshot was not.
func (s *Service) recoverSnapshot(ctx context.Context, o *operation, a journal.Actor, st runtime.Status, at string) (outcome, error) {
	previous := o.args.Previous
	t, err := s.Template(ctx, a.Template)
	if err != nil {
		return outcome{}, err
	}
	target := map[string]State{"pause": Paused, "suspend": Suspended, "golden": Suspended}[o.kind]
	// A push that got as far as recording the stored name is done.
	stored := ""
	if rec, err := s.journal.Snapshot(ctx, o.args.Snapshot); err == nil {
		stored = rec.Stored
	}
	onlyHere := ""
	if o.kind == "suspend" && stored == "" {
		onlyHere = "; the snapshot is on this node only: suspend again to store it"
	}
	if previous != Running {
		// Storing the snapshot of a paused or suspended actor: nothing
		// ran in the sandbox, the snapshot is as it was.
		return outcome{state: Suspended, reason: at + onlyHere}, nil
	}
	if m := manifestOf(o.args.Dir); m != nil {
		kind := map[string]string{"pause": KindPause, "suspend": KindCommit, "golden": KindGolden}[o.kind]
		snap := journal.Snapshot{ID: o.args.Snapshot, Actor: a.ID, Template: a.Template, Kind: kind, Scope: string(m.Scope), Dir: o.args.Dir, Stored: stored, Size: m.Size()}
		if o.kind == "golden" {
			err = s.setGolden(ctx, t, snap)
		} else {
			err = s.adopt(ctx, snap)
		}
		if err != nil {
			return outcome{}, err
		}
		// The snapshot is whole: finish by stopping the sandbox.
		if err := s.rt.Stop(ctx, a.Sandbox); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			if terr := s.thaw(ctx, o, a, runtime.StatusRunning); terr == nil {
				return outcome{state: Running, reason: fmt.Sprintf("%s; the snapshot %s was committed but the sandbox could not be stopped (%v), so the actor keeps running", at, snap.ID, err)}, nil
			}
			return outcome{state: Crashed, reason: fmt.Sprintf("%s; the snapshot %s is whole, the sandbox could not be stopped: %v", at, snap.ID, err)}, nil
		}
		_ = s.rt.Delete(ctx, a.Sandbox)
		return outcome{state: target, reason: at + "; the snapshot was committed, the operation was finished" + onlyHere}, nil
	}
	_ = removeDir(o.args.Dir)
	if st == runtime.StatusRunning || st == runtime.StatusPaused {
		if err := s.thaw(ctx, o, a, st); err != nil {
			return outcome{state: Crashed, reason: fmt.Sprintf("%s; the snapshot was not committed and the workload could not be thawed: %v", at, err)}, nil
		}
		return outcome{state: Running, reason: at + "; the snapshot was not committed, the actor was rolled back and keeps running"}, nil
	}
	_ = s.rt.Delete(ctx, a.Sandbox)
	return outcome{state: Crashed, reason: at + "; the sandbox is gone and no new snapshot was committed" + resumable(a)}, nil
}

func resumable(a journal.Actor) string {
	if a.Snapshot != "" {
		return fmt.Sprintf(": resume it from its last snapshot %s, or delete it", a.Snapshot)
	}
	return ": delete it"
}

func (s *Service) recoverResume(ctx context.Context, o *operation, a journal.Actor, st runtime.Status, at string) outcome {
	back := outcome{state: o.args.Previous, reason: at + "; the resume was rolled back, the snapshot is intact"}
	if st == runtime.StatusRunning || st == runtime.StatusPaused {
		if err := s.thaw(ctx, o, a, st); err == nil {
			return outcome{state: Running, reason: at + "; the restored sandbox was running, the resume was finished"}
		}
	}
	_ = s.rt.Delete(ctx, a.Sandbox)
	return back
}

// check compares a stable actor with its sandbox.
func (s *Service) check(ctx context.Context, a journal.Actor) error {
	st, err := s.sandboxState(ctx, a.Sandbox)
	if err != nil {
		return err
	}
	switch State(a.State) {
	case Running:
		if st == runtime.StatusRunning {
			return nil
		}
		_ = s.rt.Delete(ctx, a.Sandbox)
		reason := fmt.Sprintf("the sandbox vanished while the actor was running (runtime: %s)%s", st, resumable(a))
		s.event(ctx, a.ID, "", "reconcile", reason, 0, nil)
		return s.journal.SetActor(ctx, a.ID, string(Crashed), reason)
	case Paused, Suspended, Crashed:
		if st != runtime.StatusStopped {
			s.event(ctx, a.ID, "", "reconcile", fmt.Sprintf("removed a leftover %s sandbox of a %s actor", st, a.State), 0, nil)
			if err := s.rt.Stop(ctx, a.Sandbox); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				return err
			}
			return s.rt.Delete(ctx, a.Sandbox)
		}
	}
	return nil
}
