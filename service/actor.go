package service

import (
	"context"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
)

// Actor reads an actor with its latest snapshot and running operation.
func (s *Service) Actor(ctx context.Context, id string) (api.Actor, error) {
	rec, err := s.actorRecord(ctx, id)
	if err != nil {
		return api.Actor{}, err
	}
	return actorOf(rec), nil
}

// Actors lists every actor.
func (s *Service) Actors(ctx context.Context) ([]api.Actor, error) {
	recs, err := s.actorRecords(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Actor, 0, len(recs))
	for _, r := range recs {
		out = append(out, actorOf(r))
	}
	return out, nil
}

// actorRecord reads an actor's record as it stands: as the end of its last
// operation left it, when the journal could not record that end yet
// (unsettledEnds).
func (s *Service) actorRecord(ctx context.Context, id string) (journal.Actor, error) {
	rec, err := s.journal.Actor(ctx, id)
	return s.unsettled.overlay(rec), err
}

// actorRecords reads every actor's record as it stands (actorRecord).
func (s *Service) actorRecords(ctx context.Context) ([]journal.Actor, error) {
	recs, err := s.journal.Actors(ctx)
	for i := range recs {
		recs[i] = s.unsettled.overlay(recs[i])
	}
	return recs, err
}

func actorOf(rec journal.Actor) api.Actor {
	a := api.Actor{ID: rec.ID, Template: rec.Template, Runtime: rec.Runtime, State: api.State(rec.State), Reason: rec.Reason, Sandbox: rec.Sandbox, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Latest != nil {
		v := snapshotOf(*rec.Latest)
		a.Snapshot = &v
	}
	if o := rec.Running; o != nil {
		a.Operation = &api.Operation{ID: o.ID, Kind: o.Kind, RequestID: o.RequestID, State: o.State, Step: o.Step, Deadline: o.Deadline, StartedAt: o.StartedAt}
	}
	return a
}

func snapshotOf(r journal.Snapshot) api.Snapshot {
	return api.Snapshot{ID: r.ID, Actor: r.Actor, Template: r.Template, Kind: api.SnapshotKind(r.Kind), Scope: api.Scope(r.Scope), Dir: r.Dir, Stored: r.Stored, SizeBytes: r.Size, CreatedAt: r.CreatedAt}
}

// Events lists an actor's history after a sequence number, and where it
// ends.
func (s *Service) Events(ctx context.Context, req api.EventsRequest) (api.Events, error) {
	if _, err := s.journal.Actor(ctx, req.ID); err != nil {
		return api.Events{}, err
	}
	recs, last, err := s.journal.Events(ctx, req.ID, req.After)
	if err != nil {
		return api.Events{}, err
	}
	out := api.Events{Events: make([]api.Event, 0, len(recs)), Last: last}
	for _, e := range recs {
		out.Events = append(out.Events, api.Event{Seq: e.Seq, Operation: e.Operation, Step: e.Step, Message: e.Message, Error: e.Error, Duration: e.Duration.Seconds(), At: e.At})
	}
	return out, nil
}

// Snapshots lists snapshots, of one actor when actor is set.
func (s *Service) Snapshots(ctx context.Context, actor string) ([]api.Snapshot, error) {
	recs, err := s.journal.Snapshots(ctx, actor)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		out = append(out, snapshotOf(r))
	}
	return out, nil
}

// Snapshot reads one snapshot.
func (s *Service) Snapshot(ctx context.Context, id string) (api.Snapshot, error) {
	r, err := s.journal.Snapshot(ctx, id)
	return snapshotOf(r), err
}
