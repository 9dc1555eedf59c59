package lifecycle

import (
	"context"
	"sync"

	"github.com/stasis-run/stasis/transfer"
)

// pulledFolders are the folders of pulls whose actor runs while the folder
// is still being written (transfer.Pull.Written: the memory image, held in
// memory during the resume, written after it). A folder is removed only
// once its writing is stopped, and a pull that copies from it as a seed
// waits for it.
type pulledFolders struct {
	mu      sync.Mutex
	writing map[string]*transfer.Pull
}

func newPulledFolders() *pulledFolders {
	return &pulledFolders{writing: map[string]*transfer.Pull{}}
}

// add follows p's folder dir until it is written; what the writing ended
// with is passed to done (nil when whole).
func (w *pulledFolders) add(dir string, p *transfer.Pull, done func(error)) {
	w.mu.Lock()
	w.writing[dir] = p
	w.mu.Unlock()
	go func() {
		err := p.Written()
		w.mu.Lock()
		if w.writing[dir] == p {
			delete(w.writing, dir)
		}
		w.mu.Unlock()
		done(err)
	}()
}

// stop stops the writing of dir, if any, and waits for it: dir is then
// empty, or whole.
func (w *pulledFolders) stop(dir string) {
	w.mu.Lock()
	p := w.writing[dir]
	w.mu.Unlock()
	if p != nil {
		p.Stop()
	}
}

// stopAll stops every writing (the service closes): the folders are left
// empty, and a later resume pulls them again.
func (w *pulledFolders) stopAll() {
	w.mu.Lock()
	all := make([]*transfer.Pull, 0, len(w.writing))
	for _, p := range w.writing {
		all = append(all, p)
	}
	w.mu.Unlock()
	for _, p := range all {
		p.Stop()
	}
}

// wait waits until dir is written, or ctx ends.
func (w *pulledFolders) wait(ctx context.Context, dir string) {
	w.mu.Lock()
	p := w.writing[dir]
	w.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
	}
}
