package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
)

// Resume brings a PAUSED, SUSPENDED or CRASHED actor back from its latest
// snapshot, fetched from the store when it is not on this node. On failure
// the actor is left as it was, its snapshot intact. A FENCED actor's
// sandbox is thawed instead (fence.Lease.ResumeFenced).
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
		Body: s.runningOrFenced(func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
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
				// Its namespace is kept while it is paused or suspended;
				// the address the last sandbox took from it is put back.
				_, err = s.setupNetwork(ctx, o)
			}
			if err == nil {
				_, _, err = s.restore(ctx, o, s.templates.EngineActor(t, o.Actor), snap, t.Probe, true)
			}
			if err != nil {
				back.Reason = fmt.Sprintf("resume failed, the snapshot %s is intact: %v", o.Args.Snapshot, err)
				return back, err
			}
			return op.Outcome{State: api.Running}, nil
		})})
	return op.ActorOf(a), err
}

// renameSandbox gives an actor whose sandbox an older stasisd named (the
// actor id itself) the id of api.SandboxID before a resume makes its next
// sandbox: the old one is deleted when it is stopped, and a live one is
// refused, as a restore into a live id is. The journal holds the new id
// before any sandbox of it exists, so that a crash finds it.
func (s *Actors) renameSandbox(ctx context.Context, o *op.Operation) error {
	id := api.SandboxID(o.Actor.ID)
	if o.Actor.Sandbox == id {
		return nil
	}
	return o.Step(op.StepRenameSandbox, func() (string, error) {
		st, err := s.engines.Of(o.Actor).Status(ctx, o.Actor.Sandbox)
		if err != nil {
			return "", fmt.Errorf("the sandbox %s that an older stasisd made cannot be checked: %w", o.Actor.Sandbox, err)
		}
		if st != runtime.StatusStopped {
			return "", errdefs.Mark(fmt.Errorf("the sandbox %s that an older stasisd made is %s; delete the actor, or stop that sandbox, first", o.Actor.Sandbox, st), errdefs.ErrFailedPrecondition)
		}
		if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
			return "", err
		}
		if err := s.journal.SetActorSandbox(context.WithoutCancel(ctx), o.Actor.ID, id); err != nil {
			return "", err
		}
		old := o.Actor.Sandbox
		o.Actor.Sandbox = id
		return fmt.Sprintf("its sandboxes are now named %s (was %s)", id, old), nil
	})
}
