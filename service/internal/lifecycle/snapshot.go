package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// Pause snapshots a running actor (the template's onPause scope) into a
// snapshot kept on this node: PAUSED. Its sandbox is stopped, or, under
// Config.KeepPaused while the node has room, kept frozen in memory with
// its GPU released, so that the resume has nothing to load. On failure the
// actor keeps running.
func (s *Actors) Pause(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	return s.pause(ctx, req, "")
}

// pause is Pause; idle, when not empty, says why the actor's idle policy
// pauses it.
func (s *Actors) pause(ctx context.Context, req api.OpRequest, idle string) (api.Actor, error) {
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Pause, Actor: req.ID, RequestID: req.RequestID, Prepare: s.newSnapshotArgs,
		Body: asIdle(idle, func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			t, err := s.templates.Get(ctx, o.Actor.Template)
			if err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if _, _, err := s.take(ctx, o, t, t.Snapshots.OnPause, s.keep(), nil); err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if s.kept(ctx, o.Actor) {
				return op.Outcome{State: api.Paused, Reason: keptReason}, nil
			}
			return op.Outcome{State: api.Paused}, nil
		})})
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
	return s.suspend(ctx, req, "")
}

// suspend is Suspend; idle, when not empty, says why the actor's idle
// policy suspends it.
func (s *Actors) suspend(ctx context.Context, req api.OpRequest, idle string) (api.Actor, error) {
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Suspend, Actor: req.ID, RequestID: req.RequestID,
		Prepare: func(before journal.Actor) (op.Args, error) {
			if api.State(before.State) == api.Running {
				return s.newSnapshotArgs(before)
			}
			return op.Args{Previous: api.State(before.State), Snapshot: before.Snapshot}, nil
		},
		Body: asIdle(idle, func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
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
			// The push starts on the image while the checkpoint writes it.
			follower := s.follower()
			defer follower.Close()
			snap, m, err := s.take(ctx, o, t, t.Snapshots.OnCommit, nil, follower)
			if err != nil {
				return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
			}
			if !s.store.Configured() {
				return noStoreOutcome(), nil
			}
			// The sandbox is stopped: the GPU and memory are free while the
			// rest of the snapshot is stored.
			snap.Kind = string(api.KindCommit)
			if err := s.push(ctx, o, snap, m, api.StoredName(o.Actor.ID, snap.ID), follower); err != nil {
				return notStoredOutcome(snap.Dir, err), err
			}
			return op.Outcome{State: api.Suspended}, nil
		})})
	return op.ActorOf(a), err
}

// follower is what reads a suspend's image into the store while the
// checkpoint writes it; nil without a store (or with one that cannot be
// opened: the push says why).
func (s *Actors) follower() *archiver.Follower {
	if !s.store.Configured() {
		return nil
	}
	repo, err := s.store.Get()
	if err != nil {
		return nil
	}
	return archiver.NewFollower(repo, 0)
}

// push stores snap, whose folder's manifest is m, under name: the one way
// stasisd stores a snapshot (a suspend's commit, a paused actor's
// snapshot, a golden one). Its record names the store inside the push
// step, so that a crash after the step finds it stored. followed, when
// set, read the image while it was written (its segments are taken as
// they were cut).
func (s *Actors) push(ctx context.Context, o *op.Operation, snap journal.Snapshot, m *snapshot.Manifest, name string, followed *archiver.Follower) error {
	repo, err := s.store.Get()
	if err != nil {
		return err
	}
	snap.Stored, snap.Pushed = name, true
	to := s.stored(repo, o, name, transfer.StepPush)
	to.Options.Followed = followed
	return transfer.Push(ctx, o.Observer(), o.Actor.ID, o.Kind.Name, snap.Dir, m, to, func() error {
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
	if err := s.push(ctx, o, snap, m, api.StoredName(o.Actor.ID, snap.ID), nil); err != nil {
		return notStoredOutcome(snap.Dir, err), err
	}
	return op.Outcome{State: api.Suspended}, nil
}

// take snapshots a running actor into the operation's snapshot folder
// (keeping the sandbox frozen when keep says so), makes it the actor's
// latest snapshot and removes the older local ones. The engine leaves the
// actor running on failure; a snapshot that was committed is adopted, and
// returned, even when a later step failed.
func (s *Actors) take(ctx context.Context, o *op.Operation, t api.Template, scope api.Scope, keep func() (bool, string), follower *archiver.Follower) (journal.Snapshot, *snapshot.Manifest, error) {
	// Connections through its published ports end before its sandbox
	// stops, rather than wait on a process that is gone.
	s.ports.Disconnect(o.Actor.ID)
	a := s.templates.EngineActor(t, o.Actor)
	opts := engine.SuspendOptions{Name: o.Kind.Name, Dir: o.Args.Dir, Scope: snapshot.Scope(scope), Keep: keep, Observer: o.Observer()}
	if follower != nil {
		opts.Follower = follower
	}
	m, err := s.engines.Of(o.Actor).Suspend(ctx, a, opts)
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
