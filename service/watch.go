package service

import (
	"context"
	"errors"
	"sync"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// eventFeed wakes the watchers of actors' histories when an event is added,
// and ends them when stasisd stops.
type eventFeed struct {
	mu sync.Mutex
	// added is closed, and replaced, when an event is added.
	added   chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

func newEventFeed() *eventFeed {
	return &eventFeed{added: make(chan struct{}), stopped: make(chan struct{})}
}

// next is closed when an event is added after this call.
func (f *eventFeed) next() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.added
}

func (f *eventFeed) notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.added)
	f.added = make(chan struct{})
}

// WatchEvents sends an actor's history after req.After to send, oldest
// first, then each event as it is added, until ctx ends, send fails, the
// actor is deleted (nil) or stasisd stops (StopWatching: unavailable).
func (s *Service) WatchEvents(ctx context.Context, req api.EventsRequest, send func(api.Event) error) error {
	found := false
	for {
		// Taken before the read, so that an event added after it wakes
		// this watcher even if the read missed it.
		added := s.events.next()
		res, err := s.Events(ctx, req)
		if errors.Is(err, errdefs.ErrNotFound) && found {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		for _, e := range res.Events {
			if err := send(e); err != nil {
				return err
			}
			req.After = e.Seq
		}
		select {
		case <-added:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.events.stopped:
			return errdefs.New(errdefs.ErrUnavailable, "stasisd is stopping: watch again once it is back")
		}
	}
}

// StopWatching ends every WatchEvents call: stasisd is stopping, and a
// watch, which has no end of its own, would hold its shutdown up.
func (s *Service) StopWatching() { s.events.stop.Do(func() { close(s.events.stopped) }) }
