package archiver

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Restore writes stored snapshot name into dir, which must be empty or
// absent: every chunk is fetched, decompressed and checked against its hash,
// and the folder's manifest is written last, so dir becomes a snapshot
// folder only when it is whole. On failure dir is emptied again.
func Restore(ctx context.Context, repo *store.Repository, name, dir string, opts Options) error {
	s, err := repo.Snapshot(ctx, name)
	if err != nil {
		return err
	}
	_, err = RestoreSnapshot(ctx, repo, s, dir, opts)
	return err
}

// Seed is a folder on this node that holds a stored snapshot whole (a
// snapshot pulled before, or pushed from here): a restore takes the chunks
// it shares from it, checked against their hashes, rather than fetching
// them. Into a file held in memory (Options.Stage) they are not copied at
// all: readers are served them from the seed, and the folder's copy is
// made from the seed once the fetches are over. A seed whose file is gone
// or changed costs a fetch, nothing more.
type Seed struct {
	Dir      string
	Snapshot *store.Snapshot
}

// Pulled is what a restore moved.
type Pulled struct {
	// Bytes is the snapshot's size; Fetched the raw bytes of the chunks
	// fetched from the store (Stored of them, compressed); Seeded the raw
	// bytes taken from seeds. A chunk found in several places of the
	// snapshot is fetched or taken once.
	Bytes, Fetched, Stored, Seeded int64
}

// destination is where a chunk's bytes go: a file and an offset.
type destination struct {
	out writerAt
	at  int64
}

// writerAt is a file a restore writes: outFile, or a stagedFile. It says
// how long it waited for other writers of the file.
type writerAt interface {
	writeAt(b []byte, at int64) (time.Duration, error)
	// writeSeeded is writeAt of a chunk checked in a seed, whose bytes are
	// b: a file held in memory takes it from the seed later, and writes
	// nothing now.
	writeSeeded(b []byte, at int64) (time.Duration, error)
}

// outFile is a file a restore writes, one writer at a time: the kernel
// takes the file's lock for every buffered write, and writers that wait
// for it spin (on the H200 machine 16 writers into one file spent 3.0
// core-seconds a GB, one 0.19, and the one wrote faster).
type outFile struct {
	mu sync.Mutex
	f  *os.File
}

func (o *outFile) writeAt(b []byte, at int64) (time.Duration, error) {
	began := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	waited := time.Since(began)
	_, err := o.f.WriteAt(b, at)
	return waited, err
}

func (o *outFile) writeSeeded(b []byte, at int64) (time.Duration, error) { return o.writeAt(b, at) }

// RestoreSnapshot is Restore of a stored manifest the caller read already
// (with Snapshot, to check it before fetching anything), copying what it
// can from opts.Seeds. The packs are read in large stretches
// (Repository.PlanReads), opts.Downloads of them at once (the cores, and at
// least 8, by default), and up to opts.ReadAhead bytes ahead of their
// decoding; one goroutine per core decompresses each chunk, checks its
// hash and writes it where the snapshot has it, one writer in a file at a
// time (outFile). Memory is bounded by the stretches held (the downloads'
// and the read-ahead's, a pack each, Repository.PackRead) and a chunk's
// worth per core for its bytes.
func RestoreSnapshot(ctx context.Context, repo *store.Repository, s *store.Snapshot, dir string, opts Options) (Pulled, error) {
	f, err := StartRestore(ctx, repo, s, dir, opts)
	if err != nil {
		return Pulled{}, err
	}
	return f.Wait()
}

// Filling is a restore under way (StartRestore): its files exist at their
// sizes (in the folder, or a staged one in memory: Options.Stage), and
// Await says when a part of one holds the snapshot's bytes, so that a
// reader can use the folder (Open) before it is whole.
type Filling struct {
	dir   string
	files map[string]*fileChunks
	// staged holds the files filled in memory, by slash path.
	staged map[string]*stagedFile
	// chunks holds the state of each chunk of the snapshot.
	chunks map[string]*chunkState
	// seeds are the files of the seeds chunks are taken from, open while
	// the restore or a file held in memory may read them.
	seeds *seedFiles

	mu    sync.Mutex
	queue *jobQueue // the stretches and copies not yet started

	failed  chan struct{} // closed with err set
	err     error
	errOnce sync.Once

	trace *tracer

	fetched     chan struct{} // closed with fetchResult set
	fetchOnce   sync.Once
	fetchPulled Pulled
	fetchResult error

	finished chan struct{} // closed with pulled and result set
	pulled   Pulled
	result   error
}

// fileChunks is where a file's chunks lie: chunk i holds bytes
// [starts[i], starts[i+1]).
type fileChunks struct {
	starts []int64
	ids    []string
}

// chunkAt is the index of the chunk that holds byte off.
func (fc *fileChunks) chunkAt(off int64) int {
	return sort.Search(len(fc.ids), func(i int) bool { return fc.starts[i+1] > off })
}

// chunkState is a chunk of the snapshot as the restore has it: done is
// closed once its bytes can be read where the snapshot has them, or, for
// a chunk checked in a seed (seed set), from the seed at seedAt. Both are
// set before done is closed and not changed after.
type chunkState struct {
	done   chan struct{}
	seed   *os.File
	seedAt int64
}

// StartRestore begins RestoreSnapshot and returns once the snapshot's
// files exist at their sizes (every chunk known, the folder empty), with
// the rest of the restore running under ctx: Await waits for a part of a
// file, fetched ahead of the rest when it is not there yet, and Wait for
// the whole. The folder's manifest is written last, as in RestoreSnapshot;
// on failure the folder is emptied and every Await and Wait fails.
func StartRestore(ctx context.Context, repo *store.Repository, s *store.Snapshot, dir string, opts Options) (f *Filling, err error) {
	wrap := func(err error) error {
		return fmt.Errorf("store %s: snapshot %s: %w", repo.Backend().Location(), s.Name, err)
	}
	// Every chunk must be known, and add up to its file, before anything
	// is written.
	if err := repo.CheckChunks(s); err != nil {
		return nil, wrap(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, wrap(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, wrap(fmt.Errorf("restore into %s: %w", dir, err))
	}
	if len(entries) > 0 {
		return nil, wrap(fmt.Errorf("restore into %s: the folder holds %d entries; restore into an empty folder", dir, len(entries)))
	}
	f = &Filling{dir: dir, files: map[string]*fileChunks{}, staged: map[string]*stagedFile{}, chunks: map[string]*chunkState{},
		seeds: newSeedFiles(), trace: &tracer{began: time.Now(), fn: opts.Trace},
		failed: make(chan struct{}), fetched: make(chan struct{}), finished: make(chan struct{})}
	files, dests, order, err := f.createFiles(repo, s, dir, opts.Stage)
	if err != nil {
		for _, out := range files {
			out.Close()
		}
		f.closeStaged()
		f.seeds.release()
		_ = fsutil.RemoveContents(dir)
		return nil, wrap(err)
	}
	go func() {
		defer f.seeds.release()
		f.pulled, f.result = f.fill(ctx, repo, s, files, dests, order, opts)
		f.closeStaged()
		if f.result != nil {
			f.fail(f.result)
			_ = fsutil.RemoveContents(dir)
			f.result = wrap(f.result)
		}
		f.fetchEnded(f.pulled, f.result)
		close(f.finished)
	}()
	return f, nil
}

// Wait waits for the restore to end, the folder whole, and says what it
// moved.
func (f *Filling) Wait() (Pulled, error) {
	<-f.finished
	return f.pulled, f.result
}

// Done is closed when the restore has ended (Wait then returns at once).
func (f *Filling) Done() <-chan struct{} { return f.finished }

// Fetched waits until every chunk is fetched and checked, and Await no
// longer waits; the folder may still be being written from memory (a
// staged file, Options.Stage), which Wait waits for.
func (f *Filling) Fetched() (Pulled, error) {
	<-f.fetched
	return f.fetchPulled, f.fetchResult
}

// Staged says whether a file is filled in memory and written into the
// folder after the fetches.
func (f *Filling) Staged() bool { return len(f.staged) > 0 }

func (f *Filling) fetchEnded(p Pulled, err error) {
	f.fetchOnce.Do(func() {
		f.fetchPulled, f.fetchResult = p, err
		close(f.fetched)
	})
}

// Open opens the file at path (a slash path, as in the manifest) for
// reading, wherever its bytes are being written: a staged file in memory
// until the folder holds it. Reads of it must Await their bytes first.
func (f *Filling) Open(path string) (ReaderAtCloser, error) {
	if sf, ok := f.staged[path]; ok {
		if r := sf.open(); r != nil {
			return r, nil
		}
	}
	return os.Open(filepath.Join(f.dir, filepath.FromSlash(path)))
}

// ReaderAtCloser is a file open for reading (Filling.Open).
type ReaderAtCloser interface {
	io.ReaderAt
	io.Closer
}

// writeStaged writes the staged files into the folder, one after another.
func (f *Filling) writeStaged(ctx context.Context, sync bool) error {
	for _, sf := range f.staged {
		if err := sf.write(ctx, sync); err != nil {
			return fmt.Errorf("write %s from memory: %w", sf.path, err)
		}
	}
	return nil
}

// closeStaged lets go of the restore's hold on the files it staged: the
// memory of one not written into the folder (a restore that failed) is
// freed once the readers that opened it close it.
func (f *Filling) closeStaged() {
	for _, sf := range f.staged {
		sf.release()
	}
}

// Await returns once bytes [off, off+n) of the snapshot's file path (a
// slash path, as in the manifest) are written and checked, asking for
// those not there yet before any other; it fails when the restore does.
func (f *Filling) Await(ctx context.Context, path string, off, n int64) error {
	fc, ok := f.files[path]
	if !ok {
		return fmt.Errorf("restore into %s: the snapshot has no file %s", f.dir, path)
	}
	end := off + n
	var pending []chan struct{}
	for i := fc.chunkAt(off); i < len(fc.ids) && fc.starts[i] < end; i++ {
		done := f.chunks[fc.ids[i]].done
		select {
		case <-done:
			continue
		default:
		}
		if len(pending) == 0 || pending[len(pending)-1] != done {
			pending = append(pending, done)
		}
		f.mu.Lock()
		f.queue.hurry(fc.ids[i])
		f.mu.Unlock()
	}
	if len(pending) == 0 {
		return nil
	}
	began := time.Now()
	for _, done := range pending {
		select {
		case <-done:
		case <-f.failed:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.trace.on() {
		f.trace.emit(Trace{Kind: "await", Start: f.trace.since(began), End: f.trace.since(time.Now()), Raw: n, Chunks: len(pending), Path: path, Offset: off})
	}
	return nil
}

func (f *Filling) fail(err error) {
	f.errOnce.Do(func() {
		f.err = err
		close(f.failed)
	})
}

// fill fetches and copies every chunk of s into files, the stretches and
// copies first needed first, and those a reader awaits before the rest;
// then makes the folder a snapshot folder.
func (f *Filling) fill(ctx context.Context, repo *store.Repository, s *store.Snapshot, files []*os.File, dests map[string][]destination, order []string, opts Options) (pulled Pulled, err error) {
	defer func() {
		for _, out := range files {
			out.Close()
		}
	}()
	pulled.Bytes = s.Size()
	rep := newReporter(opts, Progress{Snapshot: s.Name, Files: len(s.Files), Bytes: pulled.Bytes})
	workers := opts.Downloads
	if workers <= 0 {
		workers = max(8, runtime.GOMAXPROCS(0))
	}
	rank := make(map[string]int, len(order))
	for i, id := range order {
		rank[id] = i
	}
	var mu sync.Mutex // guards pulled's counts and missed
	// write puts a checked chunk wherever the snapshot has it (one checked
	// in a seed, seed set, by writeSeeded), and says how long it waited
	// for other writers.
	write := func(id string, data []byte, seed *seededChunk) (time.Duration, error) {
		var waited time.Duration
		st := f.chunks[id]
		for _, d := range dests[id] {
			var w time.Duration
			var err error
			if seed != nil {
				w, err = d.out.writeSeeded(data, d.at)
			} else {
				w, err = d.out.writeAt(data, d.at)
			}
			waited += w
			if err != nil {
				return waited, err
			}
		}
		if seed != nil {
			st.seed, st.seedAt = seed.file, seed.at
		}
		rep.add(int64(len(data))*int64(len(dests[id])), 0, 0)
		close(st.done)
		return waited, nil
	}
	decoders := runtime.GOMAXPROCS(0)
	chunks, err := repo.NewChunkReader(decoders, max(workers, decoders)+readAhead(opts.ReadAhead, repo.PackRead()))
	if err != nil {
		return pulled, err
	}
	defer chunks.Close()
	buffers := make(chan []byte, workers)
	var missed []string
	// decode checks and writes a stretch a worker fetched (fetched says
	// when its read began, what it traces).
	decode := func(ctx context.Context, st *store.Stretch, fetched time.Time, tr Trace) error {
		defer func() {
			if f.trace.on() {
				tr.Start, tr.End = f.trace.since(fetched), f.trace.since(time.Now())
				f.trace.emit(tr)
			}
		}()
		tr.Kind, tr.Stored, tr.Chunks = "run", st.Run.Length, len(st.Run.Chunks)
		times, err := chunks.DecodeRun(ctx, st, func(c store.RunChunk, data []byte) error {
			mu.Lock()
			pulled.Fetched += c.Raw
			pulled.Stored += c.Stored
			mu.Unlock()
			rep.add(0, c.Stored, 0)
			tr.Raw += c.Raw
			wrote := time.Now()
			waited, err := write(c.ID, data, nil)
			tr.Write += time.Since(wrote)
			tr.WriterWait += waited
			return err
		})
		tr.Read, tr.Decode, tr.Check = times.Read, times.Decode, times.Check
		if err != nil {
			return fmt.Errorf("pack %s: %w", st.Run.Pack, err)
		}
		return nil
	}
	// copySeed copies a chunk a seed holds, checked against its hash; one
	// that is no longer what it was is fetched after (missed).
	copySeed := func(worker int, j job) error {
		began := time.Now()
		tr := Trace{Worker: worker, Urgent: j.urgent}
		defer func() {
			if f.trace.on() {
				tr.Start, tr.End = f.trace.since(began), f.trace.since(time.Now())
				f.trace.emit(tr)
			}
		}()
		tr.Kind, tr.Raw, tr.Chunks = "seed", j.seed.raw, 1
		var buf []byte
		select {
		case buf = <-buffers:
		default:
		}
		defer func() { buffers <- buf }()
		var seed seededChunk
		var ok bool
		buf, seed, ok = f.seeds.check(*j.seed, buf, &tr)
		mu.Lock()
		if ok {
			pulled.Seeded += j.seed.raw
		} else {
			missed = append(missed, j.seed.id)
		}
		mu.Unlock()
		if !ok {
			return nil
		}
		wrote := time.Now()
		waited, err := write(j.seed.id, buf, &seed)
		tr.Write, tr.WriterWait = time.Since(wrote), waited
		return err
	}
	// The chunks this node holds are checked beside the fetches; one that
	// is no longer what it was is fetched after.
	seeded, fetch := seedChunks(repo, opts.Seeds, order)
	q, err := newJobQueue(repo, fetch, seeded, rank)
	if err != nil {
		return pulled, err
	}
	p := pipeline{chunks: chunks, workers: workers, decoders: decoders, copySeed: copySeed, decode: decode}
	if err := f.runQueue(ctx, q, p); err != nil {
		return pulled, err
	}
	if len(missed) > 0 {
		q, err := newJobQueue(repo, missed, nil, rank)
		if err != nil {
			return pulled, err
		}
		if err := f.runQueue(ctx, q, p); err != nil {
			return pulled, err
		}
	}
	rep.add(0, 0, len(s.Files))
	rep.finish()
	f.fetchEnded(pulled, nil)
	if err := f.writeStaged(ctx, !opts.NoSync); err != nil {
		return pulled, err
	}
	if !opts.NoSync {
		for _, out := range files {
			if err := out.Sync(); err != nil {
				return pulled, err
			}
		}
	}
	for _, out := range files {
		if err := out.Close(); err != nil {
			return pulled, err
		}
	}
	files = nil
	// The folder becomes a snapshot when its manifest appears, whole.
	if err := fsutil.WriteAtomic(filepath.Join(f.dir, snapshot.ManifestName), bytes.NewReader(s.Meta), int64(len(s.Meta))); err != nil {
		return pulled, err
	}
	_, err = snapshot.Load(f.dir)
	return pulled, err
}

// DefaultReadAhead is Options.ReadAhead's default: 256 MiB, 10 stretches
// of a default pack. On an H100 machine (16 cores) the remote resume of
// the plain 6.7B server pulled at 1.10x its disk's cold read with 256 MiB,
// as with 1 GiB, and at 1.25x with none: the downloads' reads stayed in
// flight while the cores decoded (docs/benchmarks.md, session 39).
const DefaultReadAhead = 256 << 20

// readAhead is how many stretches of at most packRead bytes a restore may
// hold read and not decoded beyond one per download: with none, a
// stretch's buffer is taken from its fetch to its decoding's end, and the
// downloads bound both.
func readAhead(bytes, packRead int64) int {
	if bytes == 0 {
		bytes = DefaultReadAhead
	}
	if bytes < 0 || packRead <= 0 {
		return 0
	}
	return int(bytes / packRead)
}

// pipeline is how a restore's jobs are done: workers take them in the
// queue's order, fetch each stretch (or copy a chunk from a seed) and
// hand the stretch to decoders, which decode, check and write it.
type pipeline struct {
	chunks            *store.ChunkReader
	workers, decoders int
	copySeed          func(worker int, j job) error
	decode            func(ctx context.Context, st *store.Stretch, fetched time.Time, tr Trace) error
}

// fetchedRun is a stretch a worker fetched, for a decoder.
type fetchedRun struct {
	job     int // its index in the queue
	stretch *store.Stretch
	began   time.Time
	trace   Trace
}

// runQueue runs q's jobs through p, and fails f with the first error.
// The fetched stretches are decoded in the order fetched, those holding a
// chunk a reader awaits first; their number is bounded by the chunk
// reader's stretches.
func (f *Filling) runQueue(ctx context.Context, q *jobQueue, p pipeline) error {
	f.mu.Lock()
	f.queue = q
	f.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	fail := func(err error) error {
		f.fail(err)
		return err
	}
	// A token for each stretch fetched and not yet taken by a decoder;
	// never full, as no more stretches exist than the reader holds.
	ready := make(chan struct{}, p.chunks.Stretches())
	var fetching sync.WaitGroup
	fetching.Add(p.workers)
	for worker := range p.workers {
		g.Go(func() error {
			defer fetching.Done()
			// After a failure (gctx cancelled) nothing more is taken: a
			// copy from a seed would not notice on its own.
			for gctx.Err() == nil {
				f.mu.Lock()
				j, ok := q.take()
				f.mu.Unlock()
				if !ok {
					return nil
				}
				if j.seed != nil {
					if err := p.copySeed(worker, j); err != nil {
						return fail(err)
					}
					continue
				}
				began := time.Now()
				st, err := p.chunks.FetchRun(gctx, *j.run)
				if err != nil {
					return fail(fmt.Errorf("pack %s: %w", j.run.Pack, err))
				}
				f.mu.Lock()
				q.fetched(fetchedRun{job: j.index, stretch: st, began: began, trace: Trace{Worker: worker, Urgent: j.urgent}})
				f.mu.Unlock()
				ready <- struct{}{}
			}
			return gctx.Err()
		})
	}
	allFetched := make(chan struct{})
	g.Go(func() error {
		fetching.Wait()
		close(allFetched)
		return nil
	})
	for range p.decoders {
		g.Go(func() error {
			for {
				select {
				case <-ready:
				case <-allFetched:
					// Every stretch is fetched: those not yet taken
					// still have their tokens.
					select {
					case <-ready:
					default:
						return gctx.Err()
					}
				case <-gctx.Done():
					return gctx.Err()
				}
				f.mu.Lock()
				fr := q.nextFetched()
				f.mu.Unlock()
				if err := p.decode(gctx, fr.stretch, fr.began, fr.trace); err != nil {
					return fail(err)
				}
			}
		})
	}
	return g.Wait()
}

// job is one stretch of a pack to fetch, or one chunk to copy from a
// seed.
type job struct {
	index int // in its queue
	run   *store.Run
	seed  *seededChunk
	// urgent says a reader's wait moved it ahead (jobQueue.hurry).
	urgent bool
}

// jobQueue hands out a restore's jobs in the order the snapshot's files
// first need their chunks, and those holding an awaited chunk first; then
// the stretches fetched, to be decoded, in the order fetched, those
// holding an awaited chunk first. Its methods are called under
// Filling.mu.
type jobQueue struct {
	jobs    []job
	taken   []bool
	next    int
	urgent  []int
	byChunk map[string]int
	// ready are the stretches fetched and not yet decoded; awaited the
	// jobs fetched or being fetched that a reader waits for; decoding
	// those taken by a decoder.
	ready    []fetchedRun
	awaited  map[int]bool
	decoding []bool
}

func newJobQueue(repo *store.Repository, fetch []string, seeded []seededChunk, rank map[string]int) (*jobQueue, error) {
	runs, err := repo.PlanReads(fetch, repo.PackRead())
	if err != nil {
		return nil, err
	}
	q := &jobQueue{byChunk: map[string]int{}, awaited: map[int]bool{}}
	first := func(j job) int {
		if j.seed != nil {
			return rank[j.seed.id]
		}
		n := len(rank)
		for _, c := range j.run.Chunks {
			n = min(n, rank[c.ID])
		}
		return n
	}
	for i := range runs {
		q.jobs = append(q.jobs, job{run: &runs[i]})
	}
	for i := range seeded {
		q.jobs = append(q.jobs, job{seed: &seeded[i]})
	}
	slices.SortStableFunc(q.jobs, func(a, b job) int { return cmp.Compare(first(a), first(b)) })
	for i, j := range q.jobs {
		q.jobs[i].index = i
		if j.seed != nil {
			q.byChunk[j.seed.id] = i
			continue
		}
		for _, c := range j.run.Chunks {
			q.byChunk[c.ID] = i
		}
	}
	q.taken = make([]bool, len(q.jobs))
	q.decoding = make([]bool, len(q.jobs))
	return q, nil
}

// take hands out the next job: an urgent one, else the next in order.
func (q *jobQueue) take() (job, bool) {
	for len(q.urgent) > 0 {
		i := q.urgent[0]
		q.urgent = q.urgent[1:]
		if !q.taken[i] {
			q.taken[i] = true
			j := q.jobs[i]
			j.urgent = true
			return j, true
		}
	}
	for ; q.next < len(q.jobs); q.next++ {
		if !q.taken[q.next] {
			q.taken[q.next] = true
			return q.jobs[q.next], true
		}
	}
	return job{}, false
}

// hurry puts the job holding chunk id before the others, unless it has
// started; one fetched and waiting for a decoder is decoded next.
func (q *jobQueue) hurry(id string) {
	if q == nil {
		return
	}
	i, ok := q.byChunk[id]
	switch {
	case !ok:
	case !q.taken[i]:
		q.urgent = append(q.urgent, i)
	case q.jobs[i].run != nil && !q.decoding[i]:
		// Being fetched, or fetched and waiting.
		q.awaited[i] = true
	}
}

// fetched adds a stretch fetched, for a decoder.
func (q *jobQueue) fetched(fr fetchedRun) {
	q.ready = append(q.ready, fr)
}

// nextFetched takes the stretch to decode next: the first fetched that
// a reader awaits, else the first fetched. One must be there.
func (q *jobQueue) nextFetched() fetchedRun {
	i := 0
	if len(q.awaited) > 0 {
		i = max(0, slices.IndexFunc(q.ready, func(fr fetchedRun) bool { return q.awaited[fr.job] }))
	}
	fr := q.ready[i]
	q.ready = slices.Delete(q.ready, i, i+1)
	q.decoding[fr.job] = true
	if q.awaited[fr.job] {
		delete(q.awaited, fr.job)
		fr.trace.Urgent = true
	}
	return fr
}

// createFiles makes the snapshot's files in dir at their sizes (the
// largest in memory when stage lends the memory), and says where each
// chunk goes, and the chunks in the order they are needed (the files from
// the smallest, each in order), each once; it records where each file's
// chunks lie, for Await. The files it returns are those in the folder.
func (f *Filling) createFiles(repo *store.Repository, s *store.Snapshot, dir string, stage func(int64) func()) ([]*os.File, map[string][]destination, []string, error) {
	var files []*os.File
	dests := map[string][]destination{}
	var order []string
	// The smaller files first: a restore reads its state and metadata
	// whole before anything else, and the memory image as it needs it.
	sorted := slices.Clone(s.Files)
	slices.SortStableFunc(sorted, func(a, b store.File) int { return cmp.Compare(a.Size, b.Size) })
	for i, sf := range sorted {
		path := filepath.Join(dir, filepath.FromSlash(sf.Path))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return files, nil, nil, err
		}
		mode := os.FileMode(sf.Mode) & 0o777
		var writer writerAt
		var release func()
		if i == len(sorted)-1 && sf.Size > 0 && stage != nil {
			release = stage(sf.Size)
		}
		var staged *stagedFile
		if release != nil {
			// Chunks it takes from seeds are read there until the file is
			// written, and while its readers read it.
			f.seeds.hold()
			var err error
			staged, err = newStagedFile(path, mode, sf.Size, stageSegment, func() { release(); f.seeds.release() })
			if err != nil {
				return files, nil, nil, err
			}
			f.staged[sf.Path] = staged
			writer = staged
		} else {
			out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return files, nil, nil, err
			}
			files = append(files, out)
			if err := out.Truncate(sf.Size); err != nil {
				return files, nil, nil, err
			}
			writer = &outFile{f: out}
		}
		fc := &fileChunks{starts: make([]int64, 0, len(sf.Chunks)+1), ids: sf.Chunks}
		var at int64
		for _, id := range sf.Chunks {
			c, _ := repo.Chunk(id)
			if _, seen := dests[id]; !seen {
				order = append(order, id)
				f.chunks[id] = &chunkState{done: make(chan struct{})}
			}
			dests[id] = append(dests[id], destination{out: writer, at: at})
			fc.starts = append(fc.starts, at)
			at += c.Raw
		}
		fc.starts = append(fc.starts, at)
		f.files[sf.Path] = fc
		if staged != nil {
			staged.layout, staged.chunks = fc, f.chunks
		}
	}
	return files, dests, order, nil
}

// seededChunk is a chunk a seed holds: in file path at offset at (once
// open, file).
type seededChunk struct {
	id   string
	path string
	file *os.File
	at   int64
	raw  int64
}

// seedFiles keeps the seeds' files open while a restore, or a file it
// holds in memory, reads them: each holder releases its hold, and the
// files are closed with the last.
type seedFiles struct {
	mu    sync.Mutex
	files map[string]*os.File
	holds int
}

// newSeedFiles is held once, by the restore.
func newSeedFiles() *seedFiles { return &seedFiles{files: map[string]*os.File{}, holds: 1} }

func (s *seedFiles) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds++
}

func (s *seedFiles) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holds--; s.holds > 0 {
		return
	}
	for _, f := range s.files {
		f.Close()
	}
	s.files = nil
}

func (s *seedFiles) open(path string) (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.files[path] = f
	return f, nil
}

// check reads chunk c from its seed into buf and checks it against its
// id; false when it is not there as it was. The chunk returned names the
// open file; tr gets the read's and the hash's times.
func (s *seedFiles) check(c seededChunk, buf []byte, tr *Trace) ([]byte, seededChunk, bool) {
	if int64(cap(buf)) < c.raw {
		buf = make([]byte, c.raw)
	}
	buf = buf[:c.raw]
	f, err := s.open(c.path)
	if err != nil {
		return buf, c, false
	}
	c.file = f
	began := time.Now()
	n, _ := f.ReadAt(buf, c.at)
	read := time.Now()
	tr.Read = read.Sub(began)
	if int64(n) != c.raw {
		return buf, c, false
	}
	sum := sha256.Sum256(buf)
	tr.Check = time.Since(read)
	return buf, c, hex.EncodeToString(sum[:]) == c.id
}

// seedChunks splits the chunks a restore needs into those seeds hold
// (where) and those to fetch. Each chunk comes from its cheapest source.
// From a store on this node's own disks (a folder store), a seed's copy
// costs the bytes of it that are not in the page cache, the store the
// chunk's compressed size on the same disks, so a seed serves a chunk when
// no more of it must be read from disk than the store would send: after a
// busy hour has pushed a seed out of the page cache, the store's
// compressed bytes are read rather than the seed's raw ones. From a store
// elsewhere (an object store, a network file system) every chunk a seed
// holds is read here rather than sent over the network again. Among seeds,
// the one with most of the chunk in the page cache serves it.
func seedChunks(repo *store.Repository, seeds []Seed, need []string) (seeded []seededChunk, fetch []string) {
	if len(seeds) == 0 {
		return nil, need
	}
	storeOnNodeDisk := store.OnNodeDisk(repo.Backend())
	type candidate struct {
		seededChunk
		diskBytes int64
	}
	where := map[string]candidate{}
	for _, sd := range seeds {
		if sd.Snapshot == nil {
			continue
		}
		for _, f := range sd.Snapshot.Files {
			path := filepath.Join(sd.Dir, filepath.FromSlash(f.Path))
			pages, ok := residentPages(path, f.Size)
			if !ok {
				continue
			}
			var at int64
			for _, id := range f.Chunks {
				c, ok := repo.Chunk(id)
				if !ok {
					break
				}
				disk := c.Raw - pages.Bytes(at, c.Raw)
				if prev, dup := where[id]; (disk <= c.Stored || !storeOnNodeDisk) && (!dup || disk < prev.diskBytes) {
					where[id] = candidate{seededChunk{id: id, path: path, at: at, raw: c.Raw}, disk}
				}
				at += c.Raw
			}
		}
	}
	for _, id := range need {
		if c, ok := where[id]; ok {
			seeded = append(seeded, c.seededChunk)
		} else {
			fetch = append(fetch, id)
		}
	}
	return seeded, fetch
}

// residentPages is which pages of a seed's file are in the page cache, and
// false when the file is not there at its stored size. A file whose pages
// cannot be asked about counts as read from disk whole.
func residentPages(path string, size int64) (fsutil.PageMap, bool) {
	f, err := os.Open(path)
	if err != nil {
		return fsutil.PageMap{}, false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != size {
		return fsutil.PageMap{}, false
	}
	pages, err := fsutil.ResidentPages(f)
	if err != nil {
		return fsutil.PageMap{Size: size}, true
	}
	return pages, true
}
