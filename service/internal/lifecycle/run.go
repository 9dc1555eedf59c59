package lifecycle

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
	"github.com/stasis-run/stasis/store"
)

// Run starts an actor of a template: from the template's golden snapshot
// when this node can restore it, by booting it otherwise (the reason says
// why). A failed start leaves the actor CRASHED, its sandbox removed.
func (s *Actors) Run(ctx context.Context, req api.RunRequest) (api.Actor, error) {
	return s.run(ctx, req, true)
}

// run is Run, publishing the actor's ports when publish says so (a
// warming actor's are not: the template's actors hold them).
func (s *Actors) run(ctx context.Context, req api.RunRequest, publish bool) (api.Actor, error) {
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
	net, err := s.networkOf(t, req)
	if err != nil {
		return api.Actor{}, err
	}
	if !publish {
		net.Ports = nil
	}
	// The host ports are bound before the actor exists: one taken refuses
	// the run with nothing made. A free port the node picked (host port
	// 0) is recorded as picked, and kept for the actor.
	var published []api.Port
	net.Ports, published, err = s.ports.Publish(req.ID, net.Ports)
	if err != nil {
		return api.Actor{}, fmt.Errorf("actor %s: %w", req.ID, err)
	}
	began := false
	a, err := s.runner.Run(ctx, op.Request{Kind: op.Run, Actor: req.ID, RequestID: req.RequestID,
		Create:  &journal.Actor{ID: req.ID, Template: t.Name, Runtime: t.Runtime, Sandbox: api.SandboxID(req.ID), Network: net.Encode()},
		Prepare: func(journal.Actor) (op.Args, error) { return op.Args{Snapshot: t.Golden}, nil },
		Body: s.runningOrFenced(func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			began = true
			ea, err := s.prepareSandbox(ctx, o, t)
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
		})})
	if !began {
		// Refused (or answered as an earlier request was): what this call
		// published is not its actor's.
		s.ports.Unpublish(req.ID, published)
	}
	return op.ActorOf(a), err
}

// prepareSandbox sets the actor's network up and writes its bundle from
// t, for a sandbox booted or restored anew.
func (s *Actors) prepareSandbox(ctx context.Context, o *op.Operation, t api.Template) (engine.Actor, error) {
	att, err := s.setupNetwork(ctx, o)
	if err != nil {
		return engine.Actor{}, err
	}
	var ea engine.Actor
	err = o.Step(op.StepBundle, func() (string, error) {
		var err error
		ea, err = s.templates.WriteBundle(t, o.Actor, att.Netns)
		return ea.Bundle, err
	})
	return ea, err
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

// runningOrFenced is body, whose success leaves the actor RUNNING (a run,
// a resume), made to end FENCED instead when the fence froze its sandbox
// under it: the fence commands (the watchdog's, the agent's) cover
// operations under way when the fleet lease lapses, and stasisd thaws only
// FENCED actors when the lease is renewed, so a RUNNING one left frozen
// would never run again. It costs one read of the sandbox's state per start
// of a fleet actor while a fleet lease is held.
func (s *Actors) runningOrFenced(body func(context.Context, *op.Operation) (op.Outcome, error)) func(context.Context, *op.Operation) (op.Outcome, error) {
	return func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
		out, err := body(ctx, o)
		if err != nil || out.State != api.Running || !api.FleetActorID(o.Actor.ID) || s.lease.Status().Holder == "" {
			return out, err
		}
		if st, serr := s.engines.Of(o.Actor).Status(ctx, o.Actor.Sandbox); serr == nil && st == runtime.StatusPaused {
			return op.Outcome{State: api.Fenced, Reason: "its sandbox was frozen by the fence while it started (the fleet lease lapsed meanwhile); a renewal that binds it here thaws it"}, nil
		}
		return out, nil
	}
}
