package service

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
)

// Warm makes a template's golden snapshot: an actor of it is booted, waited
// ready, and suspended Full (whatever the template's snapshot config says);
// its snapshot becomes the template's golden one (also stored, when a
// store is configured) and the warming actor is deleted. New actors of the
// template then start from it where the node is compatible.
func (s *Service) Warm(ctx context.Context, req api.WarmRequest) (api.Template, error) {
	t, err := s.Template(ctx, req.Template)
	if err != nil {
		return t, err
	}
	id := api.WarmingActorID(req)
	a, err := s.Run(ctx, api.RunRequest{Template: t.Name, ID: id, RequestID: req.RequestID, Cold: true})
	if err != nil {
		return t, fmt.Errorf("warm %s: start the warming actor: %w", t.Name, err)
	}
	if a.State == api.Running {
		_, err = s.run(ctx, request{kind: opGolden, actor: id, requestID: req.RequestID,
			prepare: func(before journal.Actor) (opArgs, error) {
				snapID := newID("golden-" + t.Name)
				return opArgs{Previous: api.State(before.State), Snapshot: snapID, Dir: s.snapshotDir(snapID)}, nil
			},
			body: func(ctx context.Context, o *operation) (outcome, error) { return s.takeGolden(ctx, o, t) }})
		if err != nil {
			return t, fmt.Errorf("warm %s: %w (the warming actor %s is left for inspection; delete it when done)", t.Name, err, id)
		}
	}
	if _, err := s.Delete(ctx, api.DeleteRequest{ID: id, RequestID: req.RequestID}); err != nil {
		return t, fmt.Errorf("warm %s: the golden snapshot is made, but the warming actor %s was not deleted: %w", t.Name, id, err)
	}
	return s.Template(ctx, t.Name)
}

func (s *Service) takeGolden(ctx context.Context, o *operation, t api.Template) (outcome, error) {
	m, err := s.engineOf(o.actor).Suspend(ctx, s.engineActor(t, o.actor), engine.SuspendOptions{Dir: o.args.Dir, Scope: "Full", Observer: o.observer()})
	if m == nil {
		_ = s.removeDir(o.args.Dir)
		return s.afterFailure(ctx, o, err), err
	}
	snap := journal.Snapshot{ID: o.args.Snapshot, Actor: o.actor.ID, Template: t.Name, Kind: string(api.KindGolden), Scope: string(m.Scope), Dir: o.args.Dir, Size: m.Size()}
	if err == nil && s.store.configured() {
		name := "golden." + t.Name + "." + o.args.Snapshot
		if err = s.push(ctx, o, snap, m, name); err == nil {
			snap.Stored, snap.Pushed = name, true
		}
	}
	if jerr := s.setGolden(ctx, t, snap); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		return s.afterFailure(ctx, o, err), err
	}
	return outcome{state: api.Suspended}, nil
}

// setGolden makes snap the template's golden snapshot and drops the one it
// replaces, here and in the store.
func (s *Service) setGolden(ctx context.Context, t api.Template, snap journal.Snapshot) error {
	if err := s.journal.PutSnapshot(ctx, snap); err != nil {
		return err
	}
	if err := s.journal.SetGolden(ctx, t.Name, snap.ID); err != nil {
		return err
	}
	if t.Golden == "" || t.Golden == snap.ID {
		return nil
	}
	return s.dropSnapshot(ctx, t.Golden)
}
