package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// Run starts an actor of a template: from the template's golden snapshot
// when this node can restore it, by booting it otherwise (the reason says
// why). A failed start leaves the actor CRASHED, its sandbox removed.
func (s *Actors) Run(ctx context.Context, req api.RunRequest) (api.Actor, error) {
	t, err := s.templates.Get(ctx, req.Template)
	if err != nil {
		return api.Actor{}, err
	}
	if req.ID == "" {
		req.ID = api.NewActorID(t.Name, req.RequestID)
	}
	if err := op.CheckName("actor", req.ID); err != nil {
		return api.Actor{}, err
	}
	if err := s.lease.Allows(req.ID); err != nil {
		return api.Actor{}, err
	}
	if req.FromStored != "" {
		switch {
		case req.Cold:
			return api.Actor{}, fmt.Errorf("%w: cold and fromStored both given: an actor starts from a stored snapshot or from its template, not both", errdefs.ErrInvalidArgument)
		case !s.store.Configured():
			return api.Actor{}, fmt.Errorf("%w: this stasisd has no store to start actor %s from %s (start it without --no-store)", errdefs.ErrFailedPrecondition, req.ID, req.FromStored)
		}
		if err := store.CheckSnapshotName(req.FromStored); err != nil {
			return api.Actor{}, err
		}
		// Refused before the actor exists while the store is out of
		// reach: nothing to start it from.
		if _, err := s.store.Get(); err != nil {
			return api.Actor{}, fmt.Errorf("start actor %s from %s: %w", req.ID, req.FromStored, err)
		}
	}
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Run, Actor: req.ID, RequestID: req.RequestID,
		Create:  &journal.Actor{ID: req.ID, Template: t.Name, Runtime: t.Runtime, Sandbox: api.SandboxID(req.ID)},
		Prepare: func(journal.Actor) (op.Args, error) { return op.Args{Snapshot: t.Golden}, nil },
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			var ea engine.Actor
			err := o.Step(op.StepBundle, func() (string, error) {
				var err error
				ea, err = s.templates.WriteBundle(t, o.Actor)
				return ea.Bundle, err
			})
			if err != nil {
				return didNotStart(err), err
			}
			if req.FromStored != "" {
				if err := s.fromStored(ctx, o, t, ea, req.FromStored); err != nil {
					return didNotStart(err), err
				}
				return op.Outcome{State: api.Running, Reason: "resumed from the stored snapshot " + req.FromStored}, nil
			}
			reason := ""
			if t.Golden != "" && !req.Cold {
				err := s.fromGolden(ctx, o, t, ea)
				if err == nil {
					return op.Outcome{State: api.Running, Reason: "started from the golden snapshot " + t.Golden}, nil
				}
				reason = fmt.Sprintf("cold boot: the golden snapshot %s could not be used: %v", t.Golden, err)
				o.Note(reason)
			}
			if err := s.engines.Of(o.Actor).Boot(ctx, ea, engine.BootOptions{Probe: templates.Probe(t.Probe), Observer: o.Observer()}); err != nil {
				return didNotStart(err), err
			}
			return op.Outcome{State: api.Running, Reason: reason}, nil
		}})
	return op.ActorOf(a), err
}

func didNotStart(err error) op.Outcome {
	return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("the actor did not start: %v; delete it and run it again", err)}
}

// fromGolden restores the template's golden snapshot into the new actor's
// sandbox, fetching it from the store when it is not on this node. The
// engine refuses a snapshot this node cannot restore before any sandbox
// exists.
func (s *Actors) fromGolden(ctx context.Context, o *op.Operation, t api.Template, a engine.Actor) error {
	snap, err := s.journal.Snapshot(ctx, t.Golden)
	if err != nil {
		return err
	}
	_, _, err = s.restore(ctx, o, a, snap, t.Probe, true)
	return err
}

// fromStored restores a snapshot of the store, pushed by this node or
// another, into the new actor's sandbox and makes it the actor's latest.
func (s *Actors) fromStored(ctx context.Context, o *op.Operation, t api.Template, a engine.Actor, stored string) error {
	snap := journal.Snapshot{ID: op.NewID("snap"), Actor: o.Actor.ID, Template: t.Name, Kind: string(api.KindCommit), Stored: stored}
	// Not recorded by the restore: adopt records it once, whole, with the
	// folder the restore pulled it into ("" when it resumed from a copy
	// this node holds for any actor: a later resume finds that again).
	m, dir, err := s.restore(ctx, o, a, snap, t.Probe, false)
	if err != nil {
		return err
	}
	snap.Dir, snap.Scope, snap.Size = dir, string(m.Scope), m.Size()
	return s.adopt(ctx, snap)
}

// restore brings snap back into a's sandbox and returns its manifest and
// the folder of the actor's own copy ("" when none): from its folder on
// this node, hashed while it restores; or from a copy this node holds for
// any actor (localCopy: staged, or its own golden snapshot), resumed where
// it is; or, when neither is here, pulled from the store (transfer.PullAndResume: its stored manifest
// checked against this node before any byte moves, every chunk hash-checked
// on arrival) and, when recordCopy, recorded as here once pulled (a caller
// that records snap itself says false). A local copy whose manifest
// is damaged is refused with the cause, unless a stored copy can replace
// it.
func (s *Actors) restore(ctx context.Context, o *op.Operation, a engine.Actor, snap journal.Snapshot, p api.Probe, recordCopy bool) (*snapshot.Manifest, string, error) {
	opts := engine.ResumeOptions{Probe: templates.Probe(p), Verify: engine.VerifyWhileRestoring, Observer: o.Observer()}
	dir := snap.Dir
	if dir != "" {
		// A copy pulled here a moment ago may still be being written.
		s.pulled.wait(ctx, dir)
		// The engine reads the manifest (once); a copy it finds missing or
		// corrupt is fetched again where the store holds the snapshot: a
		// copy of a stored snapshot is a cache (a pull does not wait for
		// its bytes to reach the disk, and every later use hashes them).
		m, err := s.engines.Of(o.Actor).Resume(ctx, a, dir, opts)
		incomplete := errors.Is(err, snapshot.ErrNoManifest)
		if err == nil || !incomplete && !errors.Is(err, errdefs.ErrCorrupt) {
			return m, dir, err
		}
		if snap.Stored == "" || !s.store.Configured() {
			if incomplete {
				return nil, "", fmt.Errorf("%w: snapshot %s at %s is incomplete (%v), and it is in no store", errdefs.ErrNotFound, snap.ID, dir, err)
			}
			return nil, "", fmt.Errorf("snapshot %s is damaged on this node and in no store: %w", snap.ID, err)
		}
		o.Note(fmt.Sprintf("the copy of %s on this node cannot be used (%v); fetching the stored one", snap.ID, err))
	}
	if snap.Stored != "" {
		// A copy this node holds for any actor (staged, or its own golden
		// snapshot) is resumed from where it is.
		if m, used, err := s.resumeLocalCopy(ctx, o, a, snap.Stored, opts); used {
			return m, "", err
		}
	}
	if snap.Stored == "" || !s.store.Configured() {
		return nil, "", fmt.Errorf("%w: snapshot %s is neither on this node nor in a store", errdefs.ErrNotFound, snap.ID)
	}
	repo, err := s.store.Get()
	if err != nil {
		return nil, "", fmt.Errorf("snapshot %s is not on this node: %w", snap.ID, err)
	}
	dir = s.snapshotDir(snap.ID)
	if err := s.removeDir(dir); err != nil {
		return nil, "", err
	}
	from := s.stored(repo, o, snap.Stored, transfer.StepPull)
	from.Options.NoSync, from.Options.Seeds = true, s.seeds(ctx, repo, snap)
	if !s.cfg.PullWhole {
		from.Views = s.viewsDir()
		from.Options.Stage = s.pullMemory.Stage
	}
	pull, err := transfer.PullAndResume(ctx, s.engines.Of(o.Actor), a, dir, from, opts)
	if pull == nil {
		// Nothing a later resume could take is left behind.
		_ = s.removeDir(dir)
		return nil, "", err
	}
	// The memory image may still be being written from memory: until its
	// manifest is there, a resume from the folder finds it incomplete and
	// pulls again.
	s.pulled.add(dir, pull, func(werr error) {
		// A folder removed while it was written (its actor deleted) is
		// no news.
		if werr != nil && !errors.Is(werr, context.Canceled) {
			s.cfg.Log.Warn("a pulled copy was not written; a later resume pulls it again", "snapshot", snap.ID, "folder", dir, "err", werr)
		}
	})
	if recordCopy {
		// Later resumes use the pulled copy.
		snap.Dir = dir
		if jerr := s.journal.PutSnapshot(context.WithoutCancel(ctx), snap); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		return nil, "", err
	}
	return pull.Manifest, dir, nil
}

// maxSeeds bounds the local copies a pull copies from: each costs a read
// of its stored manifest.
const maxSeeds = 4

// seeds are the newest local copies of stored snapshots of snap's template
// on this node (pulled or pushed here): a pull of snap copies the chunks
// they share (the template's weights, its libraries) rather than fetching
// them again.
func (s *Actors) seeds(ctx context.Context, repo *store.Repository, snap journal.Snapshot) []archiver.Seed {
	all, err := s.journal.Snapshots(ctx, "")
	if err != nil {
		return nil
	}
	var seeds []archiver.Seed
	for _, c := range all {
		if len(seeds) == maxSeeds {
			break
		}
		if c.Template != snap.Template || c.Dir == "" || c.Stored == "" || c.ID == snap.ID {
			continue
		}
		// A copy still being written from memory is there in a moment;
		// its chunks are not fetched again.
		s.pulled.wait(ctx, c.Dir)
		if st, err := repo.Snapshot(ctx, c.Stored); err == nil {
			seeds = append(seeds, archiver.Seed{Dir: c.Dir, Snapshot: st})
		}
	}
	// The staged copies (golden snapshots, mostly: the weights and
	// libraries every actor of their template shares).
	staged, _ := s.staged.List()
	for _, c := range staged {
		if len(seeds) == maxSeeds {
			break
		}
		if st, err := repo.Snapshot(ctx, c.Name); err == nil && c.Name != snap.Stored {
			seeds = append(seeds, archiver.Seed{Dir: c.Dir, Snapshot: st})
		}
	}
	return seeds
}

// stored is snapshot name in repo, its progress reported in o's history as
// verb.
func (s *Actors) stored(repo *store.Repository, o *op.Operation, name, verb string) transfer.Stored {
	return transfer.Stored{Repo: repo, Name: name, Options: s.transferEvents(o, verb)}
}

// transferEvents reports a transfer's progress in the actor's history,
// every 10% or so.
func (s *Actors) transferEvents(o *op.Operation, verb string) archiver.Options {
	last := -1
	return archiver.Options{Progress: func(p archiver.Progress) {
		if p.Bytes <= 0 {
			return
		}
		tenth := int(p.BytesDone * 10 / p.Bytes)
		if tenth == last {
			return
		}
		last = tenth
		o.Progress(verb, fmt.Sprintf("%s of %s", units.Bytes(p.BytesDone), units.Bytes(p.Bytes)))
	}}
}

// Pause snapshots a running actor (the template's onPause scope) into a
// snapshot kept on this node: PAUSED. Its sandbox is stopped, or, under
// Config.KeepPaused while the node has room, kept frozen in memory with
// its GPU released, so that the resume has nothing to load. On failure the
// actor keeps running.
func (s *Actors) Pause(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Pause, Actor: req.ID, RequestID: req.RequestID, Prepare: s.newSnapshotArgs,
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			t, err := s.templates.Get(ctx, o.Actor.Template)
			if err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if _, _, err := s.take(ctx, o, t, t.Snapshots.OnPause, s.keep()); err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if s.kept(ctx, o.Actor) {
				return op.Outcome{State: api.Paused, Reason: keptReason}, nil
			}
			return op.Outcome{State: api.Paused}, nil
		}})
	return op.ActorOf(a), err
}

// keptReason is a paused actor's reason while its sandbox is kept.
const keptReason = "kept in memory, frozen, its GPU released: resume has nothing to load"

// newSnapshotArgs are the arguments of an operation that snapshots a
// running actor into a new folder.
func (s *Actors) newSnapshotArgs(before journal.Actor) (op.Args, error) {
	id := op.NewID("snap")
	return op.Args{Previous: api.State(before.State), Snapshot: id, Dir: s.snapshotDir(id)}, nil
}

// Suspend commits an actor: a snapshot (the template's onCommit scope) goes
// to the store and the sandbox is stopped: SUSPENDED. A paused actor's
// snapshot is stored as it is; a suspended actor whose push failed is
// pushed again. When the push fails, the actor is SUSPENDED with its
// snapshot on this node only, and the reason says so.
func (s *Actors) Suspend(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Suspend, Actor: req.ID, RequestID: req.RequestID,
		Prepare: func(before journal.Actor) (op.Args, error) {
			if api.State(before.State) == api.Running {
				return s.newSnapshotArgs(before)
			}
			return op.Args{Previous: api.State(before.State), Snapshot: before.Snapshot}, nil
		},
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			if o.Args.Previous != api.Running {
				out, err := s.storeExisting(ctx, o)
				if out.State == api.Suspended && o.Args.Previous == api.Paused {
					// A suspended actor's sandbox is stopped; the one its
					// pause kept holds what the snapshot holds.
					if rerr := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); rerr != nil {
						out.Reason = strings.TrimPrefix(out.Reason+"; its sandbox kept in memory could not be stopped: "+rerr.Error(), "; ")
					}
				}
				return out, err
			}
			t, err := s.templates.Get(ctx, o.Actor.Template)
			if err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			snap, m, err := s.take(ctx, o, t, t.Snapshots.OnCommit, nil)
			if err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if !s.store.Configured() {
				return noStoreOutcome(), nil
			}
			// The sandbox is stopped: the GPU and memory are free while the
			// snapshot is stored.
			snap.Kind = string(api.KindCommit)
			if err := s.push(ctx, o, snap, m, api.StoredName(o.Actor.ID, snap.ID)); err != nil {
				return notStoredOutcome(snap.Dir, err), err
			}
			return op.Outcome{State: api.Suspended}, nil
		}})
	return op.ActorOf(a), err
}

// push stores snap, whose folder's manifest is m, under name: the one way
// stasisd stores a snapshot (a suspend's commit, a paused actor's
// snapshot, a golden one). Its record names the store inside the push
// step, so that a crash after the step finds it stored.
func (s *Actors) push(ctx context.Context, o *op.Operation, snap journal.Snapshot, m *snapshot.Manifest, name string) error {
	repo, err := s.store.Get()
	if err != nil {
		return err
	}
	snap.Stored, snap.Pushed = name, true
	return transfer.Push(ctx, o.Observer(), o.Actor.ID, o.Kind.Name, snap.Dir, m, s.stored(repo, o, name, transfer.StepPush), func() error {
		return s.journal.PutSnapshot(context.WithoutCancel(ctx), snap)
	})
}

// noStoreOutcome is a suspend's end on a node without a store.
func noStoreOutcome() op.Outcome {
	return op.Outcome{State: api.Suspended, Reason: "no store is configured: the snapshot is kept on this node only"}
}

// notStoredOutcome is a suspend's end when the snapshot in dir is whole
// but its push failed.
func notStoredOutcome(dir string, err error) op.Outcome {
	return op.Outcome{State: api.Suspended, Reason: fmt.Sprintf("the snapshot is kept on this node only (%s): %v; suspend again to store it", dir, err)}
}

// storeExisting stores the snapshot of a PAUSED actor, or of a SUSPENDED
// one whose push failed: nothing runs, so nothing but the store changes.
func (s *Actors) storeExisting(ctx context.Context, o *op.Operation) (op.Outcome, error) {
	back := op.Outcome{State: o.Args.Previous, Reason: o.Actor.Reason}
	if o.Args.Snapshot == "" {
		return back, fmt.Errorf("%w: actor %s is %s without a snapshot to store", errdefs.ErrFailedPrecondition, o.Actor.ID, o.Args.Previous)
	}
	snap, err := s.journal.Snapshot(ctx, o.Args.Snapshot)
	if err != nil {
		return back, err
	}
	if !s.store.Configured() {
		return noStoreOutcome(), nil
	}
	if snap.Stored != "" {
		return op.Outcome{State: api.Suspended}, nil
	}
	m, err := snapshot.Load(snap.Dir)
	if err != nil {
		return back, fmt.Errorf("snapshot %s cannot be stored: %w", snap.ID, err)
	}
	snap.Kind = string(api.KindCommit)
	if err := s.push(ctx, o, snap, m, api.StoredName(o.Actor.ID, snap.ID)); err != nil {
		return notStoredOutcome(snap.Dir, err), err
	}
	return op.Outcome{State: api.Suspended}, nil
}

// take snapshots a running actor into the operation's snapshot folder
// (keeping the sandbox frozen when keep says so), makes it the actor's
// latest snapshot and removes the older local ones. The engine leaves the
// actor running on failure; a snapshot that was committed is adopted, and
// returned, even when a later step failed.
func (s *Actors) take(ctx context.Context, o *op.Operation, t api.Template, scope api.Scope, keep func() (bool, string)) (journal.Snapshot, *snapshot.Manifest, error) {
	a := s.templates.EngineActor(t, o.Actor)
	m, err := s.engines.Of(o.Actor).Suspend(ctx, a, engine.SuspendOptions{Dir: o.Args.Dir, Scope: snapshot.Scope(scope), Keep: keep, Observer: o.Observer()})
	if m == nil {
		_ = s.removeDir(o.Args.Dir)
		return journal.Snapshot{}, nil, err
	}
	snap := journal.Snapshot{ID: o.Args.Snapshot, Actor: o.Actor.ID, Template: t.Name, Kind: string(o.Kind.Snapshot), Scope: string(m.Scope), Dir: o.Args.Dir, Size: m.Size()}
	if jerr := s.adopt(ctx, snap); jerr != nil && err == nil {
		err = jerr
	}
	return snap, m, err
}

// adopt records a new snapshot as the actor's latest and removes the local
// folders of its older ones (stored ones stay in the store).
func (s *Actors) adopt(ctx context.Context, snap journal.Snapshot) error {
	ctx = context.WithoutCancel(ctx)
	if err := s.journal.AdoptSnapshot(ctx, snap); err != nil {
		return err
	}
	older, err := s.journal.Snapshots(ctx, snap.Actor)
	if err != nil {
		return err
	}
	for _, old := range older {
		if old.ID == snap.ID || old.Kind == string(api.KindGolden) || old.Dir == "" {
			continue
		}
		if err := s.removeDir(old.Dir); err != nil {
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
// the actor is left as it was, its snapshot intact. A FENCED actor's
// sandbox is thawed instead (fence.go).
func (s *Actors) Resume(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	if err := s.lease.Allows(req.ID); err != nil {
		return api.Actor{}, err
	}
	if a, err := s.journal.Actor(ctx, req.ID); err == nil && api.State(a.State) == api.Fenced {
		return s.lease.ResumeFenced(ctx, req)
	}
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Resume, Actor: req.ID, RequestID: req.RequestID,
		Prepare: func(before journal.Actor) (op.Args, error) {
			if before.Snapshot == "" {
				return op.Args{}, fmt.Errorf("%w: actor %s has no snapshot to resume from; delete it and run a new one", errdefs.ErrFailedPrecondition, before.ID)
			}
			return op.Args{Previous: api.State(before.State), Snapshot: before.Snapshot}, nil
		},
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			back := op.Outcome{State: o.Args.Previous, Reason: o.Actor.Reason}
			t, err := s.templates.Get(ctx, o.Actor.Template)
			if err != nil {
				return back, err
			}
			snap, err := s.journal.Snapshot(ctx, o.Args.Snapshot)
			if err == nil && o.Args.Previous == api.Paused && s.kept(ctx, o.Actor) {
				err = s.engines.Of(o.Actor).ResumeKept(ctx, s.templates.EngineActor(t, o.Actor), snap.Dir, engine.ResumeOptions{Probe: templates.Probe(t.Probe), Observer: o.Observer()})
				if err == nil {
					return op.Outcome{State: api.Running}, nil
				}
				if errors.Is(err, engine.ErrNotKept) {
					// The kept sandbox was removed; the snapshot holds the
					// same state.
					o.Note(fmt.Sprintf("the sandbox kept in memory could not be resumed (%v); resuming from the snapshot", err))
					err = nil
				}
			}
			if err == nil {
				err = s.renameSandbox(ctx, o)
			}
			if err == nil {
				_, _, err = s.restore(ctx, o, s.templates.EngineActor(t, o.Actor), snap, t.Probe, true)
			}
			if err != nil {
				back.Reason = fmt.Sprintf("resume failed, the snapshot %s is intact: %v", o.Args.Snapshot, err)
				return back, err
			}
			return op.Outcome{State: api.Running}, nil
		}})
	return op.ActorOf(a), err
}

// Delete removes an actor from any stable state: its sandbox (which frees
// its memory and GPUs), its folders and local snapshots. Stored snapshots
// stay unless Purge is set.
func (s *Actors) Delete(ctx context.Context, req api.DeleteRequest) (api.Deleted, error) {
	if req.Purge && s.store.Configured() {
		// A purge needs the store: refused while it is out of reach,
		// before anything is touched.
		if _, err := s.store.Get(); err != nil {
			return api.Deleted{ID: req.ID}, fmt.Errorf("delete %s with purge: %w (delete it without purge to keep its stored snapshots)", req.ID, err)
		}
	}
	var kept []string
	_, err := s.runner.Run(ctx, op.Request{Kind: op.Delete, Actor: req.ID, RequestID: req.RequestID,
		Prepare: func(before journal.Actor) (op.Args, error) {
			return op.Args{Previous: api.State(before.State), Purge: req.Purge}, nil
		},
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			var err error
			if kept, err = s.finishDelete(ctx, o); err != nil {
				return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("delete failed, run it again: %v", err)}, err
			}
			return op.Outcome{Deleted: true}, nil
		}})
	if err != nil {
		return api.Deleted{ID: req.ID}, err
	}
	return api.Deleted{ID: req.ID, Deleted: true, KeptSnapshots: kept}, nil
}

// finishDelete removes the sandbox, the actor's files and local snapshots
// (stored ones too with purge), then the actor's records; it returns the
// stored snapshots kept.
func (s *Actors) finishDelete(ctx context.Context, o *op.Operation) ([]string, error) {
	if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
		return nil, err
	}
	var kept []string
	err := o.Step(op.StepRemoveFiles, func() (string, error) {
		snaps, err := s.journal.Snapshots(ctx, o.Actor.ID)
		if err != nil {
			return "", err
		}
		for _, snap := range snaps {
			if snap.Kind == string(api.KindGolden) {
				continue
			}
			if err := s.removeDir(snap.Dir); err != nil {
				return "", err
			}
			// Purge deletes what this actor pushed (its record says so),
			// never a snapshot it only started from: another actor's, or a
			// template's golden one, which other actors may share.
			if snap.Stored != "" && snap.Pushed && o.Args.Purge && s.store.Configured() {
				repo, err := s.store.Get()
				if err != nil {
					return "", err
				}
				if err := repo.Delete(ctx, snap.Stored); err != nil && !errors.Is(err, store.ErrNotExist) {
					return "", err
				}
				snap.Stored = ""
			}
			if snap.Stored == "" {
				err = s.journal.DeleteSnapshot(ctx, snap.ID)
			} else {
				snap.Dir = ""
				kept = append(kept, snap.Stored)
				err = s.journal.PutSnapshot(ctx, snap)
			}
			if err != nil {
				return "", err
			}
		}
		if err := os.RemoveAll(s.templates.ActorDir(o.Actor.ID)); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d stored snapshot(s) kept", len(kept)), nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.journal.DeleteActor(ctx, o.Actor.ID, o.ID); err != nil {
		return kept, err
	}
	// The watchers of its history end: it has no more.
	s.runner.Feed().Notify()
	return kept, nil
}

// removeDir removes a snapshot folder, stopping first a pull's writing of
// it that goes on after its resume (pulledFolders).
func (s *Actors) removeDir(dir string) error {
	if dir == "" {
		return nil
	}
	s.pulled.stop(dir)
	return os.RemoveAll(dir)
}

// Exec runs a command inside a RUNNING actor's sandbox and waits for it.
func (s *Actors) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	if len(req.Args) == 0 {
		return api.ExecResult{}, fmt.Errorf("%w: exec needs a command", errdefs.ErrInvalidArgument)
	}
	a, err := s.runner.ActorRecord(ctx, req.ID)
	if err != nil {
		return api.ExecResult{}, err
	}
	if a.Running != nil {
		return api.ExecResult{}, &journal.BusyError{Actor: a.ID, Op: *a.Running}
	}
	if api.State(a.State) != api.Running {
		return api.ExecResult{}, &journal.StateError{Actor: a.ID, State: a.State, Kind: "exec", From: []string{string(api.Running)}}
	}
	res, err := s.engines.Of(a).Exec(ctx, a.Sandbox, req.Args)
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("exec %s in actor %s: %w", req.Args[0], a.ID, err)
	}
	return api.ExecResult{ExitCode: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}, nil
}
