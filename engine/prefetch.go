package engine

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Beside the image, a runtime's restore reads this node's disk for its
// own code and, one file after another, for the metadata of the files its
// sandbox held (runtime.FileHolder). Each is a small read; on a disk that
// a pull reads hard at the same time, each waits behind the pull's, and
// the restore with them (docs/benchmarks.md, "What runsc's restore reads
// beside the image"). A suspend records the files; Prefetch reads both,
// many at once, before the restore.
const (
	// prefetchWorkers is how many files' metadata is read at once: enough
	// to keep a disk's queue full.
	prefetchWorkers = 32
	// prefetchWait bounds Prefetch; what it has not read by then, the
	// restore reads itself.
	prefetchWait = 500 * time.Millisecond
)

// openFiles is what the runtime says sandbox id holds open, recorded in
// its snapshot for Prefetch; nothing, noted, where it cannot say.
func (e *Engine) openFiles(ctx context.Context, o op, id string) []string {
	h, ok := e.Runtime.(runtime.FileHolder)
	if !ok {
		return nil
	}
	files, err := h.OpenFiles(ctx, id)
	if err != nil {
		o.note("the sandbox's open files are not recorded for its restore to read first: " + err.Error())
		return nil
	}
	if len(files) > snapshot.MaxOpenFiles {
		files = files[:snapshot.MaxOpenFiles]
	}
	return files
}

// Prefetch reads into the page cache what a restore of snapshot m into
// actor a reads from this node's disk beside the image: the runtime's
// binary and the metadata of the files m says the sandbox held, found
// through a's bundle, within prefetchWait. It says what it read; nothing
// where the runtime needs none of it. A file it cannot read is left to
// the restore, which fails on it with the reason where it matters.
func (e *Engine) Prefetch(ctx context.Context, a Actor, m *snapshot.Manifest) string {
	h, ok := e.Runtime.(runtime.FileHolder)
	if !ok || m.Scope != snapshot.ScopeFull {
		return ""
	}
	began := time.Now()
	binary := "the runtime's binary"
	if err := h.Prefetch(); err != nil {
		binary = fmt.Sprintf("not the runtime's binary (%v)", err)
	}
	if len(m.OpenFiles) == 0 {
		return fmt.Sprintf("read into the page cache before the restore: %s", binary)
	}
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		return fmt.Sprintf("read into the page cache before the restore: %s; not the metadata of the files the sandbox held (%v)", binary, err)
	}
	ctx, cancel := context.WithTimeout(ctx, prefetchWait)
	defer cancel()
	paths := make(chan string)
	var read atomic.Int64
	var wg sync.WaitGroup
	for range prefetchWorkers {
		wg.Go(func() {
			for p := range paths {
				if _, err := os.Lstat(p); err == nil {
					read.Add(1)
				}
			}
		})
	}
feed:
	for _, f := range m.OpenFiles {
		p := bundle.HostPathOf(spec, a.Bundle, f)
		if p == "" {
			continue
		}
		select {
		case paths <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(paths)
	wg.Wait()
	return fmt.Sprintf("read into the page cache before the restore: %s and the metadata of %d of the %d files the sandbox held, in %.2f s",
		binary, read.Load(), len(m.OpenFiles), time.Since(began).Seconds())
}
