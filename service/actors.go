package service

import (
	"context"
	"time"

	"github.com/stasis-run/stasis/api"
)

// The API's procedures, each answered by the part that serves it.

// CreateTemplate validates and records a template.
func (s *Service) CreateTemplate(ctx context.Context, t api.Template) (api.Template, error) {
	return s.templates.Create(ctx, t)
}

// Template reads one template.
func (s *Service) Template(ctx context.Context, name string) (api.Template, error) {
	return s.templates.Get(ctx, name)
}

// Templates lists every template.
func (s *Service) Templates(ctx context.Context) ([]api.Template, error) {
	return s.templates.List(ctx)
}

// DeleteTemplate removes a template that no actor uses, with its golden
// snapshot (here and in the store).
func (s *Service) DeleteTemplate(ctx context.Context, name string) error {
	return s.actors.DeleteTemplate(ctx, name)
}

// Warm makes a template's golden snapshot: a warming actor is run cold,
// snapshotted once ready, and deleted; later actors start from the
// snapshot.
func (s *Service) Warm(ctx context.Context, req api.WarmRequest) (api.Template, error) {
	return s.actors.Warm(ctx, req)
}

// Run starts an actor of a template (lifecycle.Actors.Run).
func (s *Service) Run(ctx context.Context, req api.RunRequest) (api.Actor, error) {
	return s.actors.Run(ctx, req)
}

// Pause snapshots a running actor onto this node: PAUSED.
func (s *Service) Pause(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	return s.actors.Pause(ctx, req)
}

// Suspend commits an actor to the store: SUSPENDED.
func (s *Service) Suspend(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	return s.actors.Suspend(ctx, req)
}

// Resume brings a PAUSED, SUSPENDED, CRASHED or FENCED actor back.
func (s *Service) Resume(ctx context.Context, req api.OpRequest) (api.Actor, error) {
	return s.actors.Resume(ctx, req)
}

// Delete removes an actor from any stable state.
func (s *Service) Delete(ctx context.Context, req api.DeleteRequest) (api.Deleted, error) {
	return s.actors.Delete(ctx, req)
}

// Exec runs a command inside a RUNNING actor's sandbox and waits for it.
func (s *Service) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	return s.actors.Exec(ctx, req, api.ExecStreams{})
}

// ExecStream is Exec with the command's output written to stdout and
// stderr as it comes, and, when streams' Stdin is set, its input read
// from it as the command reads it; a terminal when the request asks.
func (s *Service) ExecStream(ctx context.Context, req api.ExecRequest, streams api.ExecStreams) (api.ExecResult, error) {
	return s.actors.Exec(ctx, req, streams)
}

// Actor reads an actor with its latest snapshot and running operation.
func (s *Service) Actor(ctx context.Context, id string) (api.Actor, error) {
	return s.actors.Actor(ctx, id)
}

// Actors lists every actor.
func (s *Service) Actors(ctx context.Context) ([]api.Actor, error) { return s.actors.Actors(ctx) }

// Events lists an actor's history after a sequence number, and where it
// ends.
func (s *Service) Events(ctx context.Context, req api.EventsRequest) (api.Events, error) {
	return s.actors.Events(ctx, req)
}

// WatchEvents sends an actor's history, then each event as it is added,
// until ctx ends, send fails, the actor is deleted or StopWatching.
func (s *Service) WatchEvents(ctx context.Context, req api.EventsRequest, send func(api.Event) error) error {
	return s.actors.WatchEvents(ctx, req, send)
}

// StopWatching ends every watch, for a stasisd that stops.
func (s *Service) StopWatching() { s.runner.Feed().Stop() }

// EndExecs ends the commands exec runs, each answering that stasisd is
// stopping, as the server stops: an interactive one would otherwise hold
// the stop for as long as its user stays.
func (s *Service) EndExecs() { s.actors.EndExecs() }

// Snapshots lists snapshots, of one actor when actor is set.
func (s *Service) Snapshots(ctx context.Context, actor string) ([]api.Snapshot, error) {
	return s.actors.Snapshots(ctx, actor)
}

// Snapshot reads one snapshot.
func (s *Service) Snapshot(ctx context.Context, id string) (api.Snapshot, error) {
	return s.actors.Snapshot(ctx, id)
}

// Stage makes a staged copy of a stored snapshot on this node.
func (s *Service) Stage(ctx context.Context, name string) (api.StagedSnapshot, error) {
	return s.actors.Stage(ctx, name)
}

// StagedSnapshots lists the staged copies on this node.
func (s *Service) StagedSnapshots(ctx context.Context) ([]api.StagedSnapshot, error) {
	return s.actors.StagedSnapshots(ctx)
}

// Reconcile settles what a stopped stasisd left: the operations it was
// running, the sandboxes against the actors' states, copies cut short.
func (s *Service) Reconcile(ctx context.Context) error { return s.actors.Reconcile(ctx) }

// Release stops the kept sandboxes of paused actors, the oldest first,
// while the node's memory is under the reserve; it returns how many.
func (s *Service) Release(ctx context.Context) (int, error) { return s.actors.Release(ctx) }

// KeepIdling pauses or suspends, every interval until ctx ends, the actors
// their template's idle policy says have been idle too long.
func (s *Service) KeepIdling(ctx context.Context, interval time.Duration) {
	s.actors.KeepIdling(ctx, interval)
}

// KeepWatchingExits waits on the process of every RUNNING actor until ctx
// ends, looking every interval for new ones: one that ends on its own
// makes its actor EXITED (CRASHED by a signal) with its exit code.
func (s *Service) KeepWatchingExits(ctx context.Context, interval time.Duration) {
	s.actors.KeepWatchingExits(ctx, interval)
}

// Logs sends an actor's console as req picks it, then with req.Follow what
// is written as it comes, until ctx ends or the actor is deleted, exits or
// crashes.
func (s *Service) Logs(ctx context.Context, req api.LogsRequest, send func([]byte) error) error {
	return s.actors.Logs(ctx, req, send)
}

// KeepConsoles marks each actor's console as it grows and rotates it over
// its bound (Config.Console), every interval until ctx ends.
func (s *Service) KeepConsoles(ctx context.Context, interval time.Duration) {
	s.actors.KeepConsoles(ctx, interval)
}

// KeepReleasing runs Release every interval until ctx ends.
func (s *Service) KeepReleasing(ctx context.Context, interval time.Duration) {
	s.actors.KeepReleasing(ctx, interval)
}
