package op

import (
	"sync"
)

// Feed wakes the watchers of actors' histories when an event is added,
// and ends them when stasisd stops.
type Feed struct {
	mu sync.Mutex
	// added is closed, and replaced, when an event is added.
	added   chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

func newFeed() *Feed {
	return &Feed{added: make(chan struct{}), stopped: make(chan struct{})}
}

// Next is closed when an event is added after this call.
func (f *Feed) Next() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.added
}

// Notify wakes the watchers.
func (f *Feed) Notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.added)
	f.added = make(chan struct{})
}

// Stop ends the watches: Stopped is closed.
func (f *Feed) Stop() { f.stop.Do(func() { close(f.stopped) }) }

// Stopped is closed when the watches end (stasisd stops).
func (f *Feed) Stopped() <-chan struct{} { return f.stopped }
