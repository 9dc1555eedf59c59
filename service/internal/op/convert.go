package op

import (
	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/network"
)

// ActorOf is an actor's record as the API gives it.
func ActorOf(rec journal.Actor) api.Actor {
	a := api.Actor{ID: rec.ID, Template: rec.Template, Runtime: rec.Runtime, State: api.State(rec.State), Reason: rec.Reason, Idle: rec.Idle, ExitCode: rec.ExitCode, ExitedAt: rec.ExitedAt, Sandbox: rec.Sandbox, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Latest != nil {
		v := SnapshotOf(*rec.Latest)
		a.Snapshot = &v
	}
	if n, err := network.ParseRecord(rec.Network); err == nil {
		a.Network = n.API()
	}
	if o := rec.Running; o != nil {
		a.Operation = &api.Operation{ID: o.ID, Kind: o.Kind, RequestID: o.RequestID, State: o.State, Step: o.Step, Deadline: o.Deadline, StartedAt: o.StartedAt}
	}
	return a
}

// SnapshotOf is a snapshot's record as the API gives it.
func SnapshotOf(r journal.Snapshot) api.Snapshot {
	return api.Snapshot{ID: r.ID, Actor: r.Actor, Template: r.Template, Kind: api.SnapshotKind(r.Kind), Scope: api.Scope(r.Scope), Dir: r.Dir, Stored: r.Stored, SizeBytes: r.Size, CreatedAt: r.CreatedAt}
}
