package op

import (
	"sync"
)

// Feed wakes what waits on one actor (the watchers of its history, the
// connections held for it) when an event is added to its history or an
// operation on it ends, and ends the watches when stasisd stops. Each
// waits on its own actor alone: a change of one actor wakes nothing that
// waits on another (but what waits on every actor's history).
type Feed struct {
	mu sync.Mutex
	// added holds, by actor, a channel closed (and dropped) at the next
	// change of that actor; there is one only while something waits.
	added   map[string]chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

func newFeed() *Feed {
	return &Feed{added: map[string]chan struct{}{}, stopped: make(chan struct{})}
}

// Next is closed at the first change of actor after this call; of any
// actor when actor is empty.
func (f *Feed) Next(actor string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.added[actor]
	if c == nil {
		c = make(chan struct{})
		f.added[actor] = c
	}
	return c
}

// Notify wakes what waits on actor, and what waits on any actor.
func (f *Feed) Notify(actor string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, key := range []string{actor, ""} {
		if c := f.added[key]; c != nil {
			close(c)
			delete(f.added, key)
		}
	}
}

// Stop ends the watches: Stopped is closed.
func (f *Feed) Stop() { f.stop.Do(func() { close(f.stopped) }) }

// Stopped is closed when the watches end (stasisd stops).
func (f *Feed) Stopped() <-chan struct{} { return f.stopped }
