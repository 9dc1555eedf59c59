package service

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/snapshot"
)

// WarmRequest warms a template.
type WarmRequest struct {
	Template  string `json:"template"`
	RequestID string `json:"requestId,omitempty"`
}

// Warm makes a template's golden snapshot: an actor of it is booted, waited
// ready, and suspended Full (whatever the template's snapshot config says);
// its snapshot becomes the template's golden one (also stored, when a
// store is configured) and the warming actor is deleted. New actors of the
// template then start from it where the node is compatible.
func (s *Service) Warm(ctx context.Context, req WarmRequest) (Template, error) {
	t, err := s.Template(ctx, req.Template)
	if err != nil {
		return t, err
	}
	id := "warm-" + t.Name
	if req.RequestID != "" {
		id += "-" + req.RequestID
	}
	if len(id) > 63 {
		id = id[:63]
	}
	a, err := s.Run(ctx, RunRequest{Template: t.Name, ID: id, RequestID: req.RequestID, Cold: true})
	if err != nil {
		return t, fmt.Errorf("warm %s: start the warming actor: %w", t.Name, err)
	}
	if a.State == Running {
		snapID := newID("golden-" + t.Name)
		args := opArgs{Previous: Running, Snapshot: snapID, Dir: s.snapshotDir(snapID)}
		start := journal.Start{Op: journal.Operation{Actor: id, Kind: "golden", RequestID: req.RequestID}, From: []string{string(Running)}, To: string(Suspending)}
		_, err = s.run(ctx, start, args, func(ctx context.Context, o *operation) (outcome, error) {
			return s.takeGolden(ctx, o, t)
		})
		if err != nil {
			return t, fmt.Errorf("warm %s: %w (the warming actor %s is left for inspection; delete it when done)", t.Name, err, id)
		}
	}
	if _, err := s.Delete(ctx, OpRequest{ID: id, RequestID: req.RequestID}); err != nil {
		return t, fmt.Errorf("warm %s: the golden snapshot is made, but the warming actor %s was not deleted: %w", t.Name, id, err)
	}
	return s.Template(ctx, t.Name)
}

func (s *Service) takeGolden(ctx context.Context, o *operation, t Template) (outcome, error) {
	m, err := s.cfg.Engine.Suspend(ctx, s.engineActor(t, o.actor), engine.SuspendOptions{Dir: o.args.Dir, Scope: snapshot.ScopeFull})
	if m == nil {
		_ = removeDir(o.args.Dir)
		return s.afterFailure(ctx, o.actor, err), err
	}
	snap := journal.Snapshot{ID: o.args.Snapshot, Actor: o.actor, Template: t.Name, Kind: KindGolden, Scope: string(m.Scope), Dir: o.args.Dir, Size: m.Size()}
	if err == nil && s.cfg.Repo != nil {
		err = s.save(ctx, o, &snap, "golden."+t.Name+"."+snap.ID, nil)
	}
	if jerr := s.setGolden(ctx, t, snap); jerr != nil && err == nil {
		err = jerr
	}
	if err != nil {
		return s.afterFailure(ctx, o.actor, err), err
	}
	return outcome{state: Suspended}, nil
}

// setGolden makes snap the template's golden snapshot and drops the one it
// replaces, here and in the store.
func (s *Service) setGolden(ctx context.Context, t Template, snap journal.Snapshot) error {
	if err := s.journal.PutSnapshot(ctx, snap); err != nil {
		return err
	}
	if err := s.journal.SetGolden(ctx, t.Name, snap.ID); err != nil {
		return err
	}
	if t.Golden == "" || t.Golden == snap.ID {
		return nil
	}
	old, err := s.journal.Snapshot(ctx, t.Golden)
	if err != nil {
		return nil
	}
	if err := removeDir(old.Dir); err != nil {
		return err
	}
	if old.Stored != "" && s.cfg.Repo != nil {
		if err := s.cfg.Repo.Delete(ctx, old.Stored); err != nil {
			s.cfg.Log.Warn("the replaced golden snapshot stays in the store", "snapshot", old.Stored, "error", err)
		}
	}
	return s.journal.DeleteSnapshot(ctx, old.ID)
}
