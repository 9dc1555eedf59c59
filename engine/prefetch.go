package engine

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Beside the image, a runtime's restore reads this node's disk for its
// own code and, one file after another, for the metadata of the files its
// sandbox held (runtime.FileHolder). Each is a small read; on a disk that
// a pull reads hard at the same time, each waits behind the pull's, and
// the restore with them (docs/benchmarks.md, "What runsc's restore reads
// beside the image"). A suspend records the files; Prefetch reads both,
// many at once, before the restore. Once restored, the sandbox faults in
// again, one page after another, what it had mapped of those files
// (runtime.PageHolder), its first request waiting on each: a suspend
// records the ranges, and the resume reads them once the sandbox runs.
const (
	// prefetchWorkers is how many files' metadata is read at once: enough
	// to keep a disk's queue full.
	prefetchWorkers = 32
	// prefetchWait bounds Prefetch; what it has not read by then, the
	// restore reads itself.
	prefetchWait = 500 * time.Millisecond
	// mappedReaders is how many pieces of the mapped files are read at
	// once, mappedPiece the most each piece holds.
	mappedReaders = 16
	mappedPiece   = 4 << 20
	// mappedMax bounds the bytes of mapped files read for a restore: a
	// sandbox's programs and libraries need far less, and a large file
	// that a sandbox had mapped whole should not be read beside a pull
	// (the sandbox's faults read what it needs of the rest).
	mappedMax = 1 << 30
	// mappedWait bounds the reading of mapped files, which goes on beside
	// the restored sandbox: by then it has faulted in what it needed.
	mappedWait = 30 * time.Second
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

// mappedFiles is what the runtime says sandbox id has mapped, recorded in
// its snapshot for Prefetch (at most snapshot.MaxMappedRanges ranges);
// nothing, noted, where it cannot say.
func (e *Engine) mappedFiles(ctx context.Context, o op, id string) []runtime.MappedFile {
	h, ok := e.Runtime.(runtime.PageHolder)
	if !ok {
		return nil
	}
	files, err := h.MappedPages(ctx, id)
	if err != nil {
		o.note("the pages the sandbox had mapped are not recorded for its restore to read first: " + err.Error())
		return nil
	}
	return firstRanges(files, snapshot.MaxMappedRanges)
}

// firstRanges keeps the first max ranges of files, in their order.
func firstRanges(files []runtime.MappedFile, max int) []runtime.MappedFile {
	for i := range files {
		if len(files[i].Ranges) >= max {
			files[i].Ranges = files[i].Ranges[:max]
			return files[:i+1]
		}
		max -= len(files[i].Ranges)
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
	said := "read into the page cache before the restore: "
	if err := h.Prefetch(); err != nil {
		said += fmt.Sprintf("not the runtime's binary (%v)", err)
	} else {
		said += "the runtime's binary"
	}
	if len(m.OpenFiles) == 0 {
		return said
	}
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		return fmt.Sprintf("%s; not the metadata of the files the sandbox held (%v)", said, err)
	}
	read := readMetadata(ctx, spec, a.Bundle, m.OpenFiles)
	return fmt.Sprintf("%s and the metadata of %d of the %d files the sandbox held, in %.2f s", said, read, len(m.OpenFiles), time.Since(began).Seconds())
}

// readMapped starts reading, in the background, the ranges of files m says
// the sandbox had mapped (at most mappedMax bytes, within mappedWait),
// which the restored sandbox would otherwise fault in one page after
// another, its first request waiting on each; it says what it reads. It
// is started once the sandbox runs (on its GPU, for a GPU actor), not
// beside the restore: read beside a pull's first seconds they slowed the
// pull and the restore more than they saved (docs/benchmarks.md, session
// 36), and by then the pull has read the disk's share of the image.
func (e *Engine) readMapped(ctx context.Context, a Actor, m *snapshot.Manifest) string {
	if e.NoMappedPages || len(m.MappedFiles) == 0 {
		return ""
	}
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		return fmt.Sprintf("the pages the sandbox had mapped are not read ahead of it (%v)", err)
	}
	pieces, size, files := mappedPieces(spec, a.Bundle, m.MappedFiles, mappedMax)
	if len(pieces) == 0 {
		return ""
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), mappedWait)
		defer cancel()
		readPieces(ctx, pieces)
	}()
	return fmt.Sprintf("reading ahead of the sandbox the %s of %d files that it had mapped", units.Bytes(size), files)
}

// readMetadata reads the metadata of the files at paths inside the
// container (found through the bundle at dir), prefetchWorkers at once,
// within prefetchWait, and says how many it read.
func readMetadata(ctx context.Context, spec *specs.Spec, dir string, inside []string) int64 {
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
	for _, f := range inside {
		p := bundle.HostPathOf(spec, dir, f)
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
	return read.Load()
}

// filePiece is a stretch of a file on this node: n bytes at off.
type filePiece struct {
	path   string
	off, n int64
}

// mappedPieces are the ranges of mapped files found on this node through
// the bundle at dir, in pieces of at most mappedPiece bytes, up to max
// bytes in all; with their bytes and how many files they are of.
func mappedPieces(spec *specs.Spec, dir string, mapped []runtime.MappedFile, max int64) (pieces []filePiece, size int64, files int) {
	for _, f := range mapped {
		p := bundle.HostPathOf(spec, dir, f.Path)
		if p == "" {
			continue
		}
		files++
		for _, r := range f.Ranges {
			for off, end := r[0], r[0]+r[1]; off < end; {
				n := min(end-off, mappedPiece, max-size)
				if n <= 0 {
					return pieces, size, files
				}
				pieces = append(pieces, filePiece{path: p, off: off, n: n})
				size += n
				off += n
			}
		}
	}
	return pieces, size, files
}

// readPieces reads the pieces into the page cache, mappedReaders at once,
// until ctx ends, and says how many bytes it read. A file that cannot be
// read, or ends sooner, is left: the sandbox's faults read what is there.
func readPieces(ctx context.Context, pieces []filePiece) int64 {
	work := make(chan filePiece)
	var read atomic.Int64
	var wg sync.WaitGroup
	for range mappedReaders {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for p := range work {
				read.Add(readPiece(ctx, p, buf))
			}
		})
	}
feed:
	for _, p := range pieces {
		select {
		case work <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return read.Load()
}

// readPiece reads piece p through buf and says how many bytes it read.
func readPiece(ctx context.Context, p filePiece, buf []byte) int64 {
	f, err := os.Open(p.path)
	if err != nil {
		return 0
	}
	defer f.Close()
	// The pieces hold what the sandbox had mapped, and some holes the
	// disk reads for less than another request would cost; the kernel's
	// readahead beyond them would read what it had not.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	var read int64
	for read < p.n && ctx.Err() == nil {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), p.n-read)], p.off+read)
		read += int64(n)
		if err != nil {
			break
		}
	}
	return read
}
