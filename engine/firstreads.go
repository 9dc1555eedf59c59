package engine

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
)

// A restored sandbox holds the same files as before its suspend, but on a
// node whose page cache does not have them (one that never held the
// snapshot, or after a busy hour) its first request faults their pages in
// one after another: the 6.7B server's first token after a remote resume
// read about 280 MB of its libraries that way, 0.4-0.7 s beyond a warm
// request (docs/benchmarks.md, sessions 35-39). The pages it had mapped
// are 2.3 times that set, and the suspend's page cache 7 to 55 times, so
// neither is the guide. The engine records the set itself: which pages of
// the held files came into the page cache between a resume and the next
// suspend (the manifest's firstReads, with those of earlier resumes), and
// a resume reads them in bulk once its image is in. Measured on an H100
// (docs/benchmarks.md, session 40), the server's first request after a
// remote resume then read 6-9 MB from the disk rather than 281 MB and
// took 0.25 s rather than 0.57 s, for 0.25 s of reading before it was
// ready.
const (
	// firstReadsGap joins stretches that lie this close: one read of the
	// gap costs less than a second request.
	firstReadsGap = 256 << 10
	// firstReadsWorkers and firstReadsPiece: reads in flight at once, and
	// the most each asks for.
	firstReadsWorkers = 16
	firstReadsPiece   = 4 << 20
	// firstReadsWait bounds the reading; what is not read by then the
	// sandbox faults in itself.
	firstReadsWait = 2 * time.Second
	// firstReadsKept bounds how many resumed actors' page maps an engine
	// keeps until their next suspend.
	firstReadsKept = 4096
)

// resumedPages is what a resume left for the next suspend of its sandbox:
// which pages of each held file (by path inside the sandbox) were in the
// page cache once its restore had opened them, and the first reads its
// snapshot recorded.
type resumedPages struct {
	resident map[string][]fsutil.Run
	earlier  []snapshot.FileRange
}

// resumedSet holds the engine's resumedPages by container id.
type resumedSet struct {
	mu  sync.Mutex
	ids map[string]resumedPages
}

func (s *resumedSet) put(id string, p resumedPages) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]resumedPages{}
	}
	if _, ok := s.ids[id]; !ok && len(s.ids) >= firstReadsKept {
		// A sandbox removed without a suspend leaves its map here; the
		// oldest cannot be told, and any is only a guide.
		for other := range s.ids {
			delete(s.ids, other)
			break
		}
	}
	s.ids[id] = p
}

func (s *resumedSet) get(id string) (resumedPages, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ids[id]
	return p, ok
}

func (s *resumedSet) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

// heldHostPaths maps each of files (paths inside a's sandbox) to the host
// file a's bundle finds it at; nil where the bundle cannot be read.
func heldHostPaths(a Actor, files []string) map[string]string {
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		return nil
	}
	hosts := make(map[string]string, len(files))
	for _, p := range files {
		if host := bundle.HostPathOf(spec, a.Bundle, p); host != "" {
			hosts[p] = host
		}
	}
	return hosts
}

// residentRuns are the stretches of each file in hosts that are in the
// page cache, asked of the kernel for firstReadsWorkers files at once; a
// file that cannot be opened or mapped is left out.
func residentRuns(hosts map[string]string) map[string][]fsutil.Run {
	var mu sync.Mutex
	runs := make(map[string][]fsutil.Run, len(hosts))
	slots := make(chan struct{}, firstReadsWorkers)
	var wg sync.WaitGroup
	for p, host := range hosts {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f, err := fsutil.OpenRegular(host)
			if err != nil {
				return
			}
			defer f.Close()
			if pages, err := fsutil.ResidentPages(f); err == nil {
				mu.Lock()
				runs[p] = pages.Runs()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return runs
}

// mapHeld starts taking, for a's next suspend, the page map of the files
// m says the sandbox held or read first; the function it returns waits
// for it, keeps it and says whether there was one to keep.
func (e *Engine) mapHeld(a Actor, m *snapshot.Manifest) func() bool {
	files := slices.Clone(m.OpenFiles)
	for _, r := range m.FirstReads {
		files = append(files, r.Path)
	}
	if len(files) == 0 {
		return func() bool { return false }
	}
	done := make(chan map[string][]fsutil.Run, 1)
	go func() { done <- residentRuns(heldHostPaths(a, files)) }()
	return func() bool {
		e.resumed.put(a.ID, resumedPages{resident: <-done, earlier: m.FirstReads})
		return true
	}
}

// readSinceResume is what of the files a's sandbox held came into the
// page cache since its resume, with the first reads its snapshot
// recorded, as the next manifest's firstReads, and a note of what it
// found; nothing where this engine did not resume it. A file the sandbox
// first opened after its resume is not among them: what of it was in the
// page cache before cannot be told.
func (e *Engine) readSinceResume(a Actor) ([]snapshot.FileRange, string) {
	before, ok := e.resumed.get(a.ID)
	if !ok {
		return nil, ""
	}
	files := make([]string, 0, len(before.resident))
	for p := range before.resident {
		files = append(files, p)
	}
	now := residentRuns(heldHostPaths(a, files))
	var read []snapshot.FileRange
	var since int64
	for _, p := range files {
		for _, r := range fsutil.Subtract(now[p], before.resident[p]) {
			read = append(read, snapshot.FileRange{Path: p, Offset: r.Off, Length: r.Len})
			since += r.Len
		}
	}
	if since == 0 {
		return before.earlier, ""
	}
	joined := joinRanges(append(read, before.earlier...))
	if total := rangesBytes(joined); total > snapshot.MaxFirstReadBytes || len(joined) > snapshot.MaxFirstReads {
		return before.earlier, fmt.Sprintf("the sandbox read %s of the files it held since its resume, more than a first request's pages (%s at most): its snapshot keeps the first reads it was resumed with",
			units.Bytes(since), units.Bytes(int64(snapshot.MaxFirstReadBytes)))
	}
	return joined, fmt.Sprintf("the sandbox read %s of the files it held since its resume; its snapshot records %s for a resume to read first", units.Bytes(since), units.Bytes(rangesBytes(joined)))
}

// joinRanges sorts rs by path and offset and joins those of a file that
// overlap or lie at most firstReadsGap apart.
func joinRanges(rs []snapshot.FileRange) []snapshot.FileRange {
	slices.SortFunc(rs, func(x, y snapshot.FileRange) int {
		if x.Path != y.Path {
			return strings.Compare(x.Path, y.Path)
		}
		return cmp.Compare(x.Offset, y.Offset)
	})
	var out []snapshot.FileRange
	for _, r := range rs {
		if n := len(out); n > 0 && out[n-1].Path == r.Path && r.Offset-(out[n-1].Offset+out[n-1].Length) <= firstReadsGap {
			out[n-1].Length = max(out[n-1].Length, r.Offset+r.Length-out[n-1].Offset)
			continue
		}
		out = append(out, r)
	}
	return out
}

func rangesBytes(rs []snapshot.FileRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.Length
	}
	return n
}

// readFirst starts reading m's first reads, found through a's bundle, into
// the page cache, firstReadsWorkers pieces at once, for at most
// firstReadsWait; the function it returns waits for the reading and says
// what it read. Nothing where m records none.
func (e *Engine) readFirst(ctx context.Context, a Actor, m *snapshot.Manifest) func() string {
	if len(m.FirstReads) == 0 {
		return func() string { return "" }
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, firstReadsWait)
	var files []string
	for _, r := range m.FirstReads {
		files = append(files, r.Path)
	}
	hosts := heldHostPaths(a, files)
	pieces := make(chan snapshot.FileRange)
	var read atomic.Int64
	var wg sync.WaitGroup
	// A worker (and its buffer) for each piece, up to firstReadsWorkers.
	var count int64
	for _, r := range m.FirstReads {
		count += (r.Length + firstReadsPiece - 1) / firstReadsPiece
	}
	for range min(count, firstReadsWorkers) {
		wg.Go(func() {
			buf := make([]byte, firstReadsPiece)
			opened := map[string]*os.File{} // nil: could not be opened
			defer func() {
				for _, f := range opened {
					if f != nil {
						f.Close()
					}
				}
			}()
			for r := range pieces {
				f, seen := opened[r.Path]
				if !seen {
					f, _ = fsutil.OpenRegular(hosts[r.Path])
					opened[r.Path] = f
				}
				if f == nil || ctx.Err() != nil {
					continue
				}
				n, _ := f.ReadAt(buf[:r.Length], r.Offset)
				read.Add(int64(n))
			}
		})
	}
	go func() {
		defer close(pieces)
		for _, r := range m.FirstReads {
			if hosts[r.Path] == "" {
				continue
			}
			for off := r.Offset; off < r.Offset+r.Length; off += firstReadsPiece {
				select {
				case pieces <- snapshot.FileRange{Path: r.Path, Offset: off, Length: min(firstReadsPiece, r.Offset+r.Length-off)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return func() string {
		waited := time.Now()
		wg.Wait()
		cancel()
		return fmt.Sprintf("read %s of the %s the sandbox read first after an earlier resume, in %.2f s (%.2f s of it waited for)",
			units.Bytes(read.Load()), units.Bytes(rangesBytes(m.FirstReads)), time.Since(began).Seconds(), time.Since(waited).Seconds())
	}
}
