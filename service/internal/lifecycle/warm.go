package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/store"
)

// Warm makes a template's golden snapshot: an actor of it is booted, waited
// ready, and suspended Full (whatever the template's snapshot config says);
// its snapshot becomes the template's golden one (also stored, when a
// store is configured) and the warming actor is deleted. New actors of the
// template then start from it where the node is compatible.
func (s *Actors) Warm(ctx context.Context, req api.WarmRequest) (api.Template, error) {
	t, err := s.templates.Get(ctx, req.Template)
	if err != nil {
		return t, err
	}
	id := api.WarmingActorID(req)
	a, err := s.run(ctx, api.RunRequest{Template: t.Name, ID: id, RequestID: req.RequestID, Cold: true}, false)
	if err != nil {
		return t, fmt.Errorf("warm %s: start the warming actor: %w", t.Name, err)
	}
	if a.State == api.Running {
		_, err = s.runner.Run(ctx, op.Request{Kind: op.Golden, Actor: id, RequestID: req.RequestID,
			Prepare: func(before journal.Actor) (op.Args, error) {
				snapID := op.NewID("golden-" + t.Name)
				return op.Args{Previous: api.State(before.State), Snapshot: snapID, Dir: s.snapshotDir(snapID)}, nil
			},
			Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) { return s.takeGolden(ctx, o, t) }})
		if err != nil {
			return t, fmt.Errorf("warm %s: %w (the warming actor %s is left for inspection; delete it when done)", t.Name, err, id)
		}
	}
	if _, err := s.Delete(ctx, api.DeleteRequest{ID: id, RequestID: req.RequestID}); err != nil {
		return t, fmt.Errorf("warm %s: the golden snapshot is made, but the warming actor %s was not deleted: %w", t.Name, id, err)
	}
	return s.templates.Get(ctx, t.Name)
}

func (s *Actors) takeGolden(ctx context.Context, o *op.Operation, t api.Template) (op.Outcome, error) {
	m, err := s.engines.Of(o.Actor).Suspend(ctx, s.templates.EngineActor(t, o.Actor), engine.SuspendOptions{Name: o.Kind.Name, Dir: o.Args.Dir, Scope: "Full", Observer: o.Observer()})
	if m == nil {
		_ = s.removeDir(o.Args.Dir)
		return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
	}
	snap := journal.Snapshot{ID: o.Args.Snapshot, Actor: o.Actor.ID, Template: t.Name, Kind: string(api.KindGolden), Scope: string(m.Scope), Dir: o.Args.Dir, Size: m.Size()}
	if err == nil && s.store.Configured() {
		name := "golden." + t.Name + "." + o.Args.Snapshot
		if err = s.push(ctx, o, snap, m, name, nil); err == nil {
			snap.Stored, snap.Pushed = name, true
		}
	}
	if jerr := s.setGolden(ctx, t, snap); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		return o.AfterFailure(ctx, s.engines.Of(o.Actor), err), err
	}
	return op.Outcome{State: api.Suspended}, nil
}

// setGolden makes snap the template's golden snapshot and drops the one it
// replaces, here and in the store.
func (s *Actors) setGolden(ctx context.Context, t api.Template, snap journal.Snapshot) error {
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

// DeleteTemplate removes a template that no actor uses, with its golden
// snapshot (here and in the store).
func (s *Actors) DeleteTemplate(ctx context.Context, name string) error {
	t, err := s.templates.Delete(ctx, name)
	if err != nil {
		return err
	}
	if t.Golden == "" {
		return nil
	}
	if err := s.dropSnapshot(ctx, t.Golden); err != nil {
		return fmt.Errorf("template %s was deleted, but its golden snapshot %s was not: %w", name, t.Golden, err)
	}
	return nil
}

// dropSnapshot removes a snapshot's folder, its stored copy and its record.
func (s *Actors) dropSnapshot(ctx context.Context, id string) error {
	snap, err := s.journal.Snapshot(ctx, id)
	if errors.Is(err, journal.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.removeDir(snap.Dir); err != nil {
		return err
	}
	if snap.Stored != "" && s.store.Configured() {
		repo, err := s.store.Get()
		if err == nil {
			err = repo.Delete(ctx, snap.Stored)
		}
		if err != nil && !errors.Is(err, store.ErrNotExist) {
			s.cfg.Log.Warn("a dropped snapshot stays in the store", "snapshot", snap.Stored, "error", err)
		}
	}
	return s.journal.DeleteSnapshot(ctx, id)
}
