package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/lazyfs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/fence"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/snapshot"
)

// Reconcile runs when stasisd starts, before it serves: every operation a
// crash interrupted is finished or rolled back from what the journal says
// it was doing and what the runtime says is there, so that each actor ends
// RUNNING, PAUSED, SUSPENDED or CRASHED with the reason. Then every stable
// actor is checked against its sandbox: a RUNNING actor whose sandbox
// vanished is CRASHED, a leftover sandbox of a stopped actor is removed.
// Last, a copy of a stored snapshot that has no manifest (a pulled copy
// whose writing the stop cut short) is removed. A runtime that cannot say
// where a sandbox stands (it does not answer, or cannot tell the sandbox
// from another) has not said that it is gone: its actor is left where it
// stood, with the reason, and nothing is removed. An
// operation that cannot be settled otherwise leaves its actor CRASHED with
// the reason, and the others are settled all the same: the daemon always
// starts. Only a journal that cannot be read is an error.
func (s *Actors) Reconcile(ctx context.Context) error {
	ops, err := s.journal.Running(ctx)
	if err != nil {
		return err
	}
	if s.lostViews, err = dropViews(s.viewsDir()); err != nil {
		return err
	}
	for _, rec := range ops {
		if err := s.recover(ctx, rec); err != nil {
			s.cfg.Log.Error("reconcile: an interrupted operation could not be settled", "kind", rec.Kind, "actor", rec.Actor, "operation", rec.ID, "error", err.Error())
			reason := fmt.Sprintf("stasisd stopped during %s at step %q, and the operation could not be settled: %v; resume or delete the actor", rec.Kind, rec.Step, err)
			if _, err := s.journal.End(ctx, journal.End{OpID: rec.ID, State: journal.OpFailed, Error: reason, ErrorCode: errdefs.Code(err), Actor: rec.Actor, ActorState: string(api.Crashed), Reason: reason}); err != nil && !errors.Is(err, journal.ErrNotFound) {
				return fmt.Errorf("reconcile %s %s (operation %s): %w", rec.Kind, rec.Actor, rec.ID, err)
			}
		}
	}
	actors, err := s.journal.Actors(ctx)
	if err != nil {
		return err
	}
	for _, a := range actors {
		if err := s.check(ctx, a); err != nil {
			// The runtime could not say where the sandbox stands, which is
			// no sign that it is gone: the actor is left as it is.
			s.cfg.Log.Error("reconcile: an actor could not be checked against its sandbox", "actor", a.ID, "error", err.Error())
			s.runner.Event(a.ID, "", "reconcile", fmt.Sprintf("stasisd could not check sandbox %s when it started; the actor was left %s", a.Sandbox, a.State), 0, err)
		}
	}
	if err := s.publishAll(ctx); err != nil {
		return err
	}
	return s.dropCutCopies(ctx)
}

// dropCutCopies removes this node's copies of stored snapshots that have
// no manifest: pulled copies whose writing ended when stasisd stopped (the
// memory image is written into the folder after the resume). No resume can
// take such a copy, which would only hold the disk; the next resume pulls
// the stored snapshot again.
func (s *Actors) dropCutCopies(ctx context.Context) error {
	snaps, err := s.journal.Snapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, snap := range snaps {
		if snap.Dir == "" || snap.Stored == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(snap.Dir, snapshot.ManifestName)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if _, err := os.Stat(snap.Dir); err != nil {
			continue // gone already, or for a resume to say why
		}
		dir := snap.Dir
		if err := s.removeDir(dir); err != nil {
			s.cfg.Log.Error("reconcile: an incomplete copy of a stored snapshot could not be removed", "snapshot", snap.ID, "folder", dir, "error", err.Error())
			continue
		}
		snap.Dir = ""
		if err := s.journal.PutSnapshot(ctx, snap); err != nil {
			return err
		}
		s.runner.Event(snap.Actor, "", "reconcile", fmt.Sprintf("removed the incomplete copy of stored snapshot %s at %s (stasisd stopped while it was written); the next resume pulls the snapshot from the store", snap.ID, dir), 0, nil)
	}
	return nil
}

func (s *Actors) recover(ctx context.Context, rec journal.Operation) error {
	o, err := s.runner.Recovered(rec)
	if err != nil {
		return err
	}
	a, err := s.journal.Actor(ctx, rec.Actor)
	if errors.Is(err, journal.ErrNotFound) {
		// A delete that had already forgotten the actor.
		_, err := s.journal.End(ctx, journal.End{OpID: rec.ID, State: journal.OpDone, Actor: rec.Actor})
		if errors.Is(err, journal.ErrNotFound) {
			err = nil
		}
		return err
	}
	if err != nil {
		return err
	}
	o.Actor = a
	at := fmt.Sprintf("stasisd stopped during %s at step %q", rec.Kind, rec.Step)
	st, err := s.engines.Of(a).Status(ctx, a.Sandbox)
	if err != nil {
		// Not an answer that the sandbox is gone: the actor goes back to
		// where it stood, and nothing is removed.
		back := o.Args.Previous
		if back == "" {
			back = api.Crashed
		}
		reason := fmt.Sprintf("%s, and the runtime could not say where sandbox %s stands (%v): it was left as it is; check the actor, then resume or delete it", at, a.Sandbox, err)
		_, err := s.journal.End(ctx, journal.End{OpID: rec.ID, State: journal.OpFailed, Error: reason, ErrorCode: errdefs.Code(errdefs.ErrUnavailable), Actor: a.ID, ActorState: string(back), Reason: reason})
		return err
	}
	s.runner.Event(a.ID, rec.ID, "reconcile", at+"; sandbox "+string(st), 0, nil)
	var out op.Outcome
	switch o.Kind.Recovery {
	case op.RecoverStart:
		out = s.recoverStart(ctx, o, st, at)
	case op.RecoverSnapshot:
		out, err = s.recoverSnapshot(ctx, o, st, at)
	case op.RecoverResume:
		out = s.recoverResume(ctx, o, st, at)
	case op.RecoverRestart:
		out = s.recoverRestart(ctx, o, st, at)
	case op.RecoverRelease:
		out = op.Outcome{State: api.Paused, Reason: at + "; its kept sandbox was stopped: resume loads its snapshot"}
		if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
			out.Reason = fmt.Sprintf("%s; its kept sandbox could not be stopped (%v): resume loads its snapshot", at, err)
		}
	case op.RecoverFence:
		out = fence.Recovered(st, at, o.Actor)
	case op.RecoverDelete:
		if _, err := s.finishDelete(ctx, o); err != nil {
			out = op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("%s; the delete could not be finished, run it again: %v", at, err)}
		} else {
			out = op.Outcome{Deleted: true}
		}
	}
	if err != nil {
		return err
	}
	end := journal.End{OpID: rec.ID, State: journal.OpFailed, Error: at, ErrorCode: errdefs.Code(errdefs.ErrUnavailable), Actor: a.ID, ActorState: string(out.State), Reason: out.Reason, ExitCode: out.ExitCode, ExitedAt: out.ExitedAt}
	if out.Deleted {
		end.ActorState = ""
		s.cfg.Log.Info("reconcile: the interrupted delete was finished", "actor", a.ID, "operation", rec.ID)
	} else {
		s.runner.Event(a.ID, rec.ID, "reconcile", fmt.Sprintf("ended %s: %s", out.State, out.Reason), 0, nil)
		s.cfg.Log.Info("reconcile: an interrupted operation was settled", "kind", rec.Kind, "actor", a.ID, "operation", rec.ID, "state", out.State, "reason", out.Reason)
	}
	if _, err := s.journal.End(ctx, end); err != nil && !(out.Deleted && errors.Is(err, journal.ErrNotFound)) {
		return err
	}
	return nil
}

// dropViews unmounts and removes the views a stasisd that stopped left in
// dir, and says which sandboxes they served: a sandbox restored through
// one while its pull went on may not hold its whole memory.
func dropViews(dir string) (map[string]bool, error) {
	names, err := lazyfs.Drop(dir)
	if err != nil {
		return nil, fmt.Errorf("views a stopped stasisd left in %s: %w", dir, err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	lost := map[string]bool{}
	for _, name := range names {
		lost[name] = true
	}
	return lost, nil
}

// thaw makes sure a sandbox that may have been cut off mid-step runs.
func (s *Actors) thaw(ctx context.Context, o *op.Operation) error {
	t, err := s.templates.Get(ctx, o.Actor.Template)
	if err != nil {
		return err
	}
	return s.engines.Of(o.Actor).Thaw(ctx, s.templates.EngineActor(t, o.Actor), o.Actor.Sandbox, o.Observer())
}

func running(st runtime.Status) bool {
	return st == runtime.StatusRunning || st == runtime.StatusPaused
}

func (s *Actors) recoverStart(ctx context.Context, o *op.Operation, st runtime.Status, at string) op.Outcome {
	if running(st) && !s.lostViews[o.Actor.Sandbox] {
		// It may have been restored from a golden snapshot with its GPU
		// state still in host memory.
		if err := s.thaw(ctx, o); err == nil {
			return op.Outcome{State: api.Running, Reason: at + "; the sandbox was running and is kept"}
		}
	}
	_ = s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer())
	return op.Outcome{State: api.Crashed, Reason: at + "; the actor did not start: delete it and run it again"}
}

// recoverRestart keeps a restarted sandbox that runs; otherwise the actor
// is as its process left it, for its restart policy to try again.
func (s *Actors) recoverRestart(ctx context.Context, o *op.Operation, st runtime.Status, at string) op.Outcome {
	if st == runtime.StatusRunning {
		return op.Outcome{State: api.Running, Reason: at + "; the restarted sandbox was running and is kept"}
	}
	_ = s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer())
	return op.Outcome{State: o.Args.Previous, Reason: at + "; the restart was rolled back", ExitCode: o.Actor.ExitCode, ExitedAt: o.Actor.ExitedAt}
}

// recoverSnapshot finishes a pause, suspend or golden whose snapshot was
// committed, and rolls back one whose snapshot was not.
func (s *Actors) recoverSnapshot(ctx context.Context, o *op.Operation, st runtime.Status, at string) (op.Outcome, error) {
	t, err := s.templates.Get(ctx, o.Actor.Template)
	if err != nil {
		return op.Outcome{}, err
	}
	// A push that got as far as recording the stored name is done.
	stored, pushed := "", false
	if rec, err := s.journal.Snapshot(ctx, o.Args.Snapshot); err == nil {
		stored, pushed = rec.Stored, rec.Pushed
	}
	onlyHere := ""
	if o.Kind == op.Suspend && stored == "" {
		onlyHere = "; the snapshot is on this node only: suspend again to store it"
	}
	if o.Args.Previous != api.Running {
		// Storing the snapshot of a paused or suspended actor: nothing
		// ran in the sandbox, the snapshot is as it was.
		return op.Outcome{State: api.Suspended, Reason: at + onlyHere}, nil
	}
	if m, err := snapshot.Load(o.Args.Dir); err == nil {
		snap := journal.Snapshot{ID: o.Args.Snapshot, Actor: o.Actor.ID, Template: o.Actor.Template, Kind: string(o.Kind.Snapshot), Scope: string(m.Scope), Dir: o.Args.Dir, Stored: stored, Pushed: pushed, Size: m.Size()}
		if stored != "" {
			snap.Kind = string(api.KindCommit)
		}
		if o.Kind == op.Golden {
			err = s.setGolden(ctx, t, snap)
		} else {
			err = s.adopt(ctx, snap)
		}
		if err != nil {
			return op.Outcome{}, err
		}
		// The snapshot is whole: finish by stopping the sandbox.
		if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
			if terr := s.thaw(ctx, o); terr == nil {
				return op.Outcome{State: api.Running, Reason: fmt.Sprintf("%s; the snapshot %s was committed but the sandbox could not be stopped (%v), so the actor keeps running", at, snap.ID, err)}, nil
			}
			return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("%s; the snapshot %s is whole, the sandbox could not be stopped: %v", at, snap.ID, err)}, nil
		}
		return op.Outcome{State: o.Kind.Target, Reason: at + "; the snapshot was committed, the operation was finished" + onlyHere}, nil
	}
	_ = s.removeDir(o.Args.Dir)
	if running(st) {
		if err := s.thaw(ctx, o); err != nil {
			return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("%s; the snapshot was not committed and the workload could not be thawed: %v", at, err)}, nil
		}
		return op.Outcome{State: api.Running, Reason: at + "; the snapshot was not committed, the actor was rolled back and keeps running"}, nil
	}
	_ = s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer())
	return op.Outcome{State: api.Crashed, Reason: at + "; the sandbox is gone and no new snapshot was committed" + op.Resumable(o.Actor)}, nil
}

func (s *Actors) recoverResume(ctx context.Context, o *op.Operation, st runtime.Status, at string) op.Outcome {
	// A sandbox restored through a view while its pull went on is kept
	// only once the pull was whole and the view closed.
	if running(st) && !s.lostViews[o.Actor.Sandbox] {
		if err := s.thaw(ctx, o); err == nil {
			return op.Outcome{State: api.Running, Reason: at + "; the restored sandbox was running, the resume was finished"}
		}
	}
	_ = s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer())
	return op.Outcome{State: o.Args.Previous, Reason: at + "; the resume was rolled back, the snapshot is intact"}
}

// check compares a stable actor with its sandbox.
func (s *Actors) check(ctx context.Context, a journal.Actor) error {
	st, err := s.engines.Of(a).Status(ctx, a.Sandbox)
	if err != nil {
		return err
	}
	switch api.State(a.State) {
	case api.Running, api.Fenced:
		switch {
		case st == runtime.StatusRunning && api.State(a.State) == api.Running,
			st == runtime.StatusPaused && api.State(a.State) == api.Fenced:
			return nil
		case st == runtime.StatusPaused:
			// Frozen without stasisd: by the fleet agent, which fences a
			// node whose stasisd does not answer, or by hand. Nothing is
			// lost; the fence loop thaws it if the fleet lease binds it.
			reason := "its sandbox was found frozen when stasisd started (fenced by the fleet agent while stasisd did not answer, or paused by hand); resume it, or let a renewal of the fleet lease thaw it"
			s.runner.Event(a.ID, "", "reconcile", reason, 0, nil)
			return s.journal.SetActor(ctx, a.ID, string(api.Fenced), reason)
		case st == runtime.StatusRunning:
			reason := "its sandbox was found running when stasisd started, though it was fenced"
			s.runner.Event(a.ID, "", "reconcile", reason, 0, nil)
			return s.journal.SetActor(ctx, a.ID, string(api.Running), reason)
		}
		_ = s.engines.Of(a).Remove(ctx, a.ID, a.Sandbox, s.runner.NoteObserver(a.ID))
		reason := fmt.Sprintf("the sandbox vanished while the actor was running (runtime: %s): its process ended while stasisd was down, how is unknown%s", st, op.Resumable(a))
		s.runner.Event(a.ID, "", "reconcile", reason, 0, nil)
		// An end, found rather than seen: its time is when it was found,
		// and the template's restart policy applies to it as to one seen.
		return s.journal.SetActorEnded(ctx, a.ID, string(api.Crashed), reason, api.ExitUnknown, time.Now())
	case api.Paused, api.Suspended, api.Crashed, api.Exited:
		if st == runtime.StatusPaused && api.State(a.State) == api.Paused && s.cfg.KeepPaused != nil {
			return nil // kept in memory by its pause
		}
		if st != runtime.StatusStopped {
			s.runner.Event(a.ID, "", "reconcile", fmt.Sprintf("removed a leftover %s sandbox of a %s actor", st, a.State), 0, nil)
			return s.engines.Of(a).Remove(ctx, a.ID, a.Sandbox, s.runner.NoteObserver(a.ID))
		}
	}
	return nil
}
