package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/store"
)

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
	var d deletion
	_, err := s.runner.Run(ctx, op.Request{Kind: op.Delete, Actor: req.ID, RequestID: req.RequestID,
		Prepare: func(before journal.Actor) (op.Args, error) {
			return op.Args{Previous: api.State(before.State), Purge: req.Purge, Force: req.Force}, nil
		},
		Body: func(ctx context.Context, o *op.Operation) (op.Outcome, error) {
			var err error
			if d, err = s.finishDelete(ctx, o); err != nil {
				return op.Outcome{State: api.Crashed, Reason: fmt.Sprintf("delete failed, run it again: %v", err)}, err
			}
			return op.Outcome{Deleted: true}, nil
		}})
	if err != nil {
		return api.Deleted{ID: req.ID}, err
	}
	return api.Deleted{ID: req.ID, Deleted: true, KeptSnapshots: d.kept, NetworkLeft: d.networkLeft}, nil
}

// deletion is what a delete left: the stored snapshots kept and, where it
// was forced past its network, why that was not wholly removed.
type deletion struct {
	kept        []string
	networkLeft string
}

// finishDelete removes the sandbox, the actor's files and local snapshots
// (stored ones too with purge), then the actor's records.
func (s *Actors) finishDelete(ctx context.Context, o *op.Operation) (deletion, error) {
	var d deletion
	if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
		return d, err
	}
	if err := o.Step(op.StepNetwork, func() (string, error) {
		err := s.teardownNetwork(ctx, o.Actor)
		switch {
		case err == nil:
			return "its network removed and its ports given up", nil
		case o.Args.Force:
			// Its ports are given up and its namespace removed whatever
			// the plugins answer (Teardown); what they made outside it
			// may stay.
			d.networkLeft = fmt.Sprintf("%v; forced past it: what the network's plugins made for the actor (an address, a host interface) may be left for them, or you, to clean up", err)
			s.cfg.Log.Warn("a forced delete went past the actor's network", "actor", o.Actor.ID, "error", err.Error())
			return "deleted past its network (forced): " + d.networkLeft, nil
		}
		return "", fmt.Errorf("%w (a forced delete, stasis actor rm --force, deletes the actor anyway and says what its plugins may still hold)", err)
	}); err != nil {
		return d, err
	}
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
				d.kept = append(d.kept, snap.Stored)
				err = s.journal.PutSnapshot(ctx, snap)
			}
			if err != nil {
				return "", err
			}
		}
		if err := s.consoles.Remove(s.consolePath(o.Actor.ID)); err != nil {
			return "", err
		}
		if err := os.RemoveAll(s.templates.ActorDir(o.Actor.ID)); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d stored snapshot(s) kept", len(d.kept)), nil
	})
	if err != nil {
		return d, err
	}
	if err := s.journal.DeleteActor(ctx, o.Actor.ID, o.ID); err != nil {
		return d, err
	}
	// The watchers of its history end: it has no more.
	s.runner.Feed().Notify(o.Actor.ID)
	return d, nil
}
