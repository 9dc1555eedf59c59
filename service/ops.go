package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Snapshot kinds.
const (
	KindPause  = "pause"
	KindCommit = "commit"
	KindGolden = "golden"
)

// RunRequest starts a new actor.
type RunRequest struct {
	Template string `json:"template"`
	// ID names the actor; one is made up when empty.
	ID        string `json:"id,omitempty"`
	RequestID string `json:"requestId,omitempty"`
	// Cold boots the actor even when the template has a golden snapshot.
	Cold bool `json:"cold,omitempty"`
}

// Run starts an actor of a template: from the template's golden snapshot
// when this node can restore it, by booting it otherwise (the reason says
// why). A failed start leaves the actor CRASHED, its sandbox removed.
func (s *Service) Run(ctx context.Context, req RunRequest) (Actor, error) {
	t, err := s.Template(ctx, req.Template)
	if err != nil {
		return Actor{}, err
	}
	if req.ID == "" {
		req.ID = newID(t.Name)
	}
	if err := checkName("actor", req.ID); err != nil {
		return Actor{}, err
	}
	start := journal.Start{Op: journal.Operation{Actor: req.ID, Kind: "run", RequestID: req.RequestID}, To: string(Creating),
		Create: &journal.Actor{ID: req.ID, Template: t.Name, Sandbox: req.ID}}
	return s.run(ctx, start, opArgs{Snapshot: t.Golden}, func(ctx context.Context, o *operation) (outcome, error) {
		var a engine.Actor
		err := s.step(ctx, o, "bundle", func() (string, error) {
			var err error
			a, err = s.writeBundle(t, o.actor)
			return a.Bundle, err
		})
		if err != nil {
			return s.createFailed(ctx, o, err)
		}
		reason := ""
		if t.Golden != "" && !req.Cold {
			err := s.fromGolden(ctx, o, t, a)
			if err == nil {
				return outcome{state: Running, reason: "started from the golden snapshot " + t.Golden}, nil
			}
			reason = fmt.Sprintf("cold boot: the golden snapshot %s could not be used: %v", t.Golden, err)
			s.event(ctx, o.actor, o.id, "note", reason, 0, nil)
		}
		if err := s.boot(ctx, o, t, a); err != nil {
			return s.createFailed(ctx, o, err)
		}
		return outcome{state: Running, reason: reason}, nil
	})
}

func (s *Service) boot(ctx context.Context, o *operation, t Template, a engine.Actor) error {
	err := s.step(ctx, o, "boot", func() (string, error) {
		if err := s.rt.Create(ctx, a.ID, a.Bundle, runtime.CreateOptions{ConsoleLog: a.ConsoleLog}); err != nil {
			return "", err
		}
		return "sandbox started", s.rt.Start(ctx, a.ID)
	})
	if err != nil {
		return err
	}
	return s.cfg.Engine.WaitReady(ctx, a, a.ID, t.Probe.engine())
}

// fromGolden restores the template's golden snapshot into the new actor's
// sandbox, fetching it from the store when it is not on this node. The
// engine refuses a snapshot this node cannot restore before any sandbox
// exists.
func (s *Service) fromGolden(ctx context.Context, o *operation, t Template, a engine.Actor) error {
	snap, err := s.journal.Snapshot(ctx, t.Golden)
	if err != nil {
		return err
	}
	dir, err := s.localCopy(ctx, o, a, snap)
	if err != nil {
		return err
	}
	return s.cfg.Engine.Resume(ctx, a, dir, engine.ResumeOptions{ID: a.ID, Probe: t.Probe.engine(), Verify: engine.VerifySizes})
}

// localCopy is the folder of a snapshot on this node, pulled from the store
// (and verified chunk by chunk) when it is not here. The stored manifest is
// checked against this node first, so that a snapshot it cannot restore is
// refused before gigabytes are fetched.
func (s *Service) localCopy(ctx context.Context, o *operation, a engine.Actor, snap journal.Snapshot) (string, error) {
	if manifestOf(snap.Dir) != nil {
		return snap.Dir, nil
	}
	if snap.Stored == "" || s.cfg.Repo == nil {
		return "", fmt.Errorf("snapshot %s is neither on this node nor in a store", snap.ID)
	}
	stored, err := s.cfg.Repo.Snapshot(ctx, snap.Stored)
	if err != nil {
		return "", err
	}
	m, err := snapshot.Parse(stored.Meta)
	if err != nil {
		return "", fmt.Errorf("stored snapshot %s: %w", snap.Stored, err)
	}
	if _, err := s.cfg.Engine.Compatible(ctx, a, m); err != nil {
		return "", err
	}
	dir := s.snapshotDir(snap.ID)
	err = s.step(ctx, o, "pull", func() (string, error) {
		if err := removeDir(dir); err != nil {
			return "", err
		}
		if err := s.cfg.Repo.Restore(ctx, snap.Stored, dir, s.transferEvents(ctx, o, "pull")); err != nil {
			return "", err
		}
		snap.Dir = dir
		return fmt.Sprintf("%s fetched from %s", snap.Stored, s.cfg.Repo.Backend().Location()), s.journal.PutSnapshot(ctx, snap)
	})
	return dir, err
}

// transferEvents reports a transfer's progress in the actor's history,
// every 10% or so.
func (s *Service) transferEvents(ctx context.Context, o *operation, verb string) store.Options {
	last := -1
	return store.Options{Progress: func(p store.Progress) {
		if p.Bytes <= 0 {
			return
		}
		tenth := int(p.BytesDone * 10 / p.Bytes)
		if tenth == last {
			return
		}
		last = tenth
		s.event(ctx, o.actor, o.id, verb, fmt.Sprintf("%s of %s", units.Bytes(p.BytesDone), units.Bytes(p.Bytes)), 0, nil)
	}}
}

func (s *Service) createFailed(ctx context.Context, o *operation, err error) (outcome, error) {
	_ = s.rt.Delete(ctx, o.actor)
	return outcome{state: Crashed, reason: fmt.Sprintf("the actor did not start: %v; delete it and run it again", err)}, err
}

// OpRequest names an actor and the request, for idempotent retries.
type OpRequest struct {
	ID        string `json:"id"`
	RequestID string `json:"requestId,omitempty"`
	// Purge also deletes the actor's stored snapshots (delete only).
	Purge bool `json:"purge,omitempty"`
}

// Pause snapshots a running actor (the template's onPause scope) into a
// snapshot kept on this node, and stops its sandbox: PAUSED. On failure the
// actor keeps running.
func (s *Service) Pause(ctx context.Context, req OpRequest) (Actor, error) {
	a, t, err := s.actorAndTemplate(ctx, req.ID)
	if err != nil {
		return Actor{}, err
	}
	snapID := newID("snap")
	args := opArgs{Previous: Running, Snapshot: snapID, Dir: s.snapshotDir(snapID)}
	start := journal.Start{Op: journal.Operation{Actor: a.ID, Kind: "pause", RequestID: req.RequestID}, From: []string{string(Running)}, To: string(Pausing)}
	return s.run(ctx, start, args, func(ctx context.Context, o *operation) (outcome, error) {
		if _, err := s.take(ctx, o, t, KindPause, t.Snapshots.OnPause); err != nil {
			return s.afterFailure(ctx, a.Sandbox, err), err
		}
		return outcome{state: Paused}, nil
	})
}

// Suspend commits an actor: a snapshot (the template's onCommit scope) goes
// to the store and the sandbox is stopped: SUSPENDED. A paused actor's
// snapshot is stored as it is; a suspended actor whose push failed is
// pushed again. When the push fails, the actor is SUSPENDED with its
// snapshot on this node only, and the reason says so.
func (s *Service) Suspend(ctx context.Context, req OpRequest) (Actor, error) {
	a, t, err := s.actorAndTemplate(ctx, req.ID)
	if err != nil {
		return Actor{}, err
	}
	from := []string{string(Running), string(Paused), string(Suspended)}
	if !slices.Contains(from, string(a.State)) {
		return Actor{}, &journal.StateError{Actor: a.ID, State: string(a.State), Kind: "suspend", From: from}
	}
	args := opArgs{Previous: a.State}
	if a.State == Running {
		args.Snapshot = newID("snap")
		args.Dir = s.snapshotDir(args.Snapshot)
	} else if a.Snapshot != nil {
		args.Snapshot, args.Dir = a.Snapshot.ID, a.Snapshot.Dir
	}
	start := journal.Start{Op: journal.Operation{Actor: a.ID, Kind: "suspend", RequestID: req.RequestID}, From: []string{string(a.State)}, To: string(Suspending)}
	return s.run(ctx, start, args, func(ctx context.Context, o *operation) (outcome, error) {
		var snap journal.Snapshot
		if a.State == Running {
			var err error
			if snap, err = s.take(ctx, o, t, KindCommit, t.Snapshots.OnCommit); err != nil {
				return s.afterFailure(ctx, a.Sandbox, err), err
			}
		} else {
			if args.Snapshot == "" {
				return outcome{state: a.State, reason: a.Reason}, fmt.Errorf("actor %s is %s without a snapshot to store", a.ID, a.State)
			}
			var err error
			if snap, err = s.journal.Snapshot(ctx, args.Snapshot); err != nil {
				return outcome{state: a.State, reason: a.Reason}, err
			}
		}
		return s.push(ctx, o, snap)
	})
}

// push stores a snapshot as the actor's commit.
func (s *Service) push(ctx context.Context, o *operation, snap journal.Snapshot) (outcome, error) {
	if s.cfg.Repo == nil {
		return outcome{state: Suspended, reason: "no store is configured: the snapshot is kept on this node only"}, nil
	}
	if snap.Stored != "" {
		return outcome{state: Suspended}, nil
	}
	err := s.save(ctx, o, &snap, snap.Actor+"."+snap.ID, func() error {
		snap.Kind = KindCommit
		return s.journal.PutSnapshot(ctx, snap)
	})
	if err != nil {
		return outcome{state: Suspended, reason: fmt.Sprintf("the snapshot is kept on this node only (%s): %v; suspend again to store it", snap.Dir, err)}, err
	}
	return outcome{state: Suspended}, nil
}

// save runs the push step: the snapshot goes into the store under name,
// and record (when set) journals it inside the step, so that a crash after
// the step finds it recorded.
func (s *Service) save(ctx context.Context, o *operation, snap *journal.Snapshot, name string, record func() error) error {
	return s.step(ctx, o, "push", func() (string, error) {
		if _, err := s.cfg.Repo.Save(ctx, name, snap.Dir, s.transferEvents(ctx, o, "push")); err != nil {
			return "", err
		}
		snap.Stored = name
		msg := fmt.Sprintf("stored as %s in %s", name, s.cfg.Repo.Backend().Location())
		if record == nil {
			return msg, nil
		}
		return msg, record()
	})
}

// take snapshots a running actor into the operation's snapshot folder,
// makes it the actor's latest snapshot and removes the older local ones.
// The engine leaves the actor running on failure.
func (s *Service) take(ctx context.Context, o *operation, t Template, kind string, scope snapshot.Scope) (journal.Snapshot, error) {
	a := s.engineActor(t, o.actor)
	m, err := s.cfg.Engine.Suspend(ctx, a, engine.SuspendOptions{Dir: o.args.Dir, Scope: scope})
	if m == nil {
		_ = removeDir(o.args.Dir)
		return journal.Snapshot{}, err
	}
	// A committed snapshot is whole even when a later step failed.
	snap := journal.Snapshot{ID: o.args.Snapshot, Actor: o.actor, Template: t.Name, Kind: kind, Scope: string(m.Scope), Dir: o.args.Dir, Size: m.Size()}
	if jerr := s.adopt(ctx, snap); jerr != nil && err == nil {
		err = jerr
	}
	return snap, err
}

// adopt records a new snapshot as the actor's latest and removes the local
// folders of its older ones (stored ones stay in the store).
func (s *Service) adopt(ctx context.Context, snap journal.Snapshot) error {
	if err := s.journal.PutSnapshot(ctx, snap); err != nil {
		return err
	}
	if err := s.journal.SetActorSnapshot(ctx, snap.Actor, snap.ID); err != nil {
		return err
	}
	older, err := s.journal.Snapshots(ctx, snap.Actor)
	if err != nil {
		return err
	}
	for _, old := range older {
		if old.ID == snap.ID || old.Kind == KindGolden || old.Dir == "" {
			continue
		}
		if err := removeDir(old.Dir); err != nil {
			return err
		}
		old.Dir = ""
		if old.Stored == "" {
			err = s.journal.DeleteSnapshot(ctx, old.ID)
		} else {
			err = s.journal.PutSnapshot(ctx, old)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Resume brings a PAUSED, SUSPENDED or CRASHED actor back from its latest
// snapshot, fetched from the store when it is not on this node. On failure
// the actor is left as it was, its snapshot intact.
func (s *Service) Resume(ctx context.Context, req OpRequest) (Actor, error) {
	a, t, err := s.actorAndTemplate(ctx, req.ID)
	if err != nil {
		return Actor{}, err
	}
	from := []string{string(Paused), string(Suspended), string(Crashed)}
	if !slices.Contains(from, string(a.State)) {
		return Actor{}, &journal.StateError{Actor: a.ID, State: string(a.State), Kind: "resume", From: from}
	}
	if a.Snapshot == nil {
		return Actor{}, fmt.Errorf("%w: actor %s has no snapshot to resume from; delete it and run a new one", engine.ErrRefused, a.ID)
	}
	args := opArgs{Previous: a.State, Snapshot: a.Snapshot.ID}
	start := journal.Start{Op: journal.Operation{Actor: a.ID, Kind: "resume", RequestID: req.RequestID}, From: []string{string(a.State)}, To: string(Resuming)}
	return s.run(ctx, start, args, func(ctx context.Context, o *operation) (outcome, error) {
		back := outcome{state: a.State, reason: a.Reason}
		snap, err := s.journal.Snapshot(ctx, a.Snapshot.ID)
		if err != nil {
			return back, err
		}
		ea := s.engineActor(t, a.ID)
		dir, err := s.localCopy(ctx, o, ea, snap)
		if err == nil {
			err = s.cfg.Engine.Resume(ctx, ea, dir, engine.ResumeOptions{ID: a.Sandbox, Probe: t.Probe.engine(), Verify: engine.VerifySizes})
		}
		if err != nil {
			back.reason = fmt.Sprintf("resume failed, the snapshot %s is intact: %v", snap.ID, err)
			return back, err
		}
		return outcome{state: Running}, nil
	})
}

// Delete removes an actor from any stable state: its sandbox (which frees
// its memory and GPUs), its folders and local snapshots. Stored snapshots
// stay unless Purge is set.
func (s *Service) Delete(ctx context.Context, req OpRequest) (Actor, error) {
	a, err := s.journal.Actor(ctx, req.ID)
	if err != nil {
		return Actor{}, err
	}
	start := journal.Start{Op: journal.Operation{Actor: a.ID, Kind: "delete", RequestID: req.RequestID}, To: string(Deleting)}
	return s.run(ctx, start, opArgs{Previous: State(a.State), Purge: req.Purge}, func(ctx context.Context, o *operation) (outcome, error) {
		if err := s.finishDelete(ctx, o, a.Sandbox, req.Purge); err != nil {
			return outcome{state: Crashed, reason: fmt.Sprintf("delete failed, run it again: %v", err)}, err
		}
		return outcome{deleted: true}, nil
	})
}

func (s *Service) finishDelete(ctx context.Context, o *operation, sandbox string, purge bool) error {
	err := s.step(ctx, o, "stop", func() (string, error) {
		if err := s.rt.Stop(ctx, sandbox); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return "", err
		}
		return "sandbox gone, memory and GPUs freed", s.rt.Delete(ctx, sandbox)
	})
	if err != nil {
		return err
	}
	err = s.step(ctx, o, "remove-files", func() (string, error) {
		snaps, err := s.journal.Snapshots(ctx, o.actor)
		if err != nil {
			return "", err
		}
		kept := 0
		for _, snap := range snaps {
			if snap.Kind == KindGolden {
				continue
			}
			if err := removeDir(snap.Dir); err != nil {
				return "", err
			}
			if snap.Stored != "" && purge && s.cfg.Repo != nil {
				if err := s.cfg.Repo.Delete(ctx, snap.Stored); err != nil && !errors.Is(err, store.ErrNotExist) {
					return "", err
				}
				snap.Stored = ""
			}
			if snap.Stored == "" {
				err = s.journal.DeleteSnapshot(ctx, snap.ID)
			} else {
				snap.Dir = ""
				kept++
				err = s.journal.PutSnapshot(ctx, snap)
			}
			if err != nil {
				return "", err
			}
		}
		if err := os.RemoveAll(s.actorDir(o.actor)); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d stored snapshot(s) kept", kept), nil
	})
	if err != nil {
		return err
	}
	return s.journal.DeleteActor(ctx, o.actor)
}

func (s *Service) actorAndTemplate(ctx context.Context, id string) (Actor, Template, error) {
	a, err := s.Actor(ctx, id)
	if err != nil {
		return a, Template{}, err
	}
	t, err := s.Template(ctx, a.Template)
	return a, t, err
}
