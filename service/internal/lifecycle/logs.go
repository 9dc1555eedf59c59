package lifecycle

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/service/internal/console"
)

// followEvery is how often a followed console is looked at for more.
const followEvery = 250 * time.Millisecond

// consolePath is where actor id's console is written.
func (s *Actors) consolePath(id string) string {
	return filepath.Join(s.templates.ActorDir(id), "console.log")
}

// Logs sends actor req.ID's console as req picks it, then with req.Follow
// what is written as it comes, until ctx ends, the actor is deleted, exits
// or crashes, or stasisd stops (unavailable).
func (s *Actors) Logs(ctx context.Context, req api.LogsRequest, send func([]byte) error) error {
	a, err := s.runner.ActorRecord(ctx, req.ID)
	if err != nil {
		return err
	}
	if req.Tail != nil && *req.Tail < 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "logs: tail must be 0 or more lines (unset for all)")
	}
	path := s.consolePath(a.ID)
	pos, err := s.consoles.Read(path, console.Pick{Since: req.Since, Tail: req.Tail}, send)
	if err != nil || !req.Follow {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := s.runner.Feed().Stopped()
	go func() {
		select {
		case <-stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	ended := func() bool {
		a, err := s.runner.ActorRecord(ctx, a.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			return true
		}
		state := api.State(a.State)
		return err == nil && a.Running == nil && (state == api.Exited || state == api.Crashed)
	}
	err = s.consoles.Follow(ctx, path, pos, followEvery, ended, send)
	select {
	case <-stopped:
		return errdefs.New(errdefs.ErrUnavailable, "stasisd is stopping: follow the logs again once it is back")
	default:
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// KeepConsoles marks and rotates every actor's console every interval
// until ctx ends (package console).
func (s *Actors) KeepConsoles(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, func() {
		paths, err := filepath.Glob(filepath.Join(s.cfg.DataDir, "actors", "*", "console.log"))
		if err != nil {
			return
		}
		if err := s.consoles.Look(paths, time.Now()); err != nil {
			s.cfg.Log.Warn("keeping the actors' consoles", "error", err.Error())
		}
	})
}
