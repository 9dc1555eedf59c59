// Package archiver moves snapshot folders into and out of a store
// repository: Save cuts each file with the repository's chunker, hashes the
// chunks on every core and hands the new ones to the repository's packer;
// Restore fetches the chunks back, checked, and writes the folder with its
// manifest last. The repository (package store) owns the format: chunking,
// compression, packs, the index, locks and GC.
package archiver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Progress reports a transfer as it goes.
type Progress struct {
	Snapshot  string `json:"snapshot"`
	Files     int    `json:"files"`
	FilesDone int    `json:"filesDone"`
	Bytes     int64  `json:"bytes"`
	BytesDone int64  `json:"bytesDone"`
	// Stored counts new compressed bytes written (Save) or read (Restore).
	Stored int64 `json:"stored"`
}

// Options tune Save and Restore.
type Options struct {
	// Progress, when set, is called from one goroutine at a time, at most
	// every ProgressEvery and once at the end.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Uploads bounds the packs written at once (Save),
	// store.DefaultUploads when zero;
	// Downloads the stretches of packs read at once (Restore), the cores
	// and at least 8 when zero.
	Uploads   int
	Downloads int
	// ReadAhead is how many stored bytes a restore may have read and not
	// yet decoded, beyond a stretch per download: the disk
	// reads on while the cores are busy (with the sandbox's own restore,
	// in a pull beside it), and the decoding catches up once they are
	// free. DefaultReadAhead when zero; none when negative.
	ReadAhead int64
	// Seeds are folders on this node whose chunks a restore copies rather
	// than fetches (Restore).
	Seeds []Seed
	// NoSync leaves a restored folder's files to the kernel to write back,
	// for a folder that is a cache of the stored snapshot (a pull that is
	// resumed at once, and hash-checked on every later use): waiting for
	// its bytes to reach the disk would double the pull's time (Restore).
	NoSync bool
	// Stage, when set, is asked whether a restore may hold its largest
	// file (the memory image), of size bytes, in memory: it returns nil to
	// refuse, or a release that the restore calls once that memory is
	// freed. A file held in memory is filled in anonymous memory files,
	// from which readers of the folder being filled are served
	// (Filling.Open), and written into the folder only once every chunk is
	// fetched and checked (Filling.Fetched, then Wait). A restore that
	// shares the disk with the store it reads then reads it alone: the
	// kernel's write-back of the copy, which starts once the dirty pages
	// pass its threshold, would otherwise take half the disk while the
	// restored sandbox waits on the reads (Restore).
	Stage func(size int64) (release func())
	// Trace, when set, is told of every piece of a restore's work as it
	// ends, one call at a time (Restore).
	Trace func(Trace)
	// Followed, when set, read the snapshot's image while it was written:
	// the segments it cut are taken as they were (Save).
	Followed *Follower
}

type progressReporter struct {
	mu    sync.Mutex
	p     Progress
	fn    func(Progress)
	every time.Duration
	last  time.Time
}

func newReporter(opts Options, p Progress) *progressReporter {
	every := opts.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	return &progressReporter{p: p, fn: opts.Progress, every: every}
}

func (r *progressReporter) add(done, stored int64, filesDone int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.p.BytesDone += done
	r.p.Stored += stored
	r.p.FilesDone += filesDone
	if r.fn != nil && time.Since(r.last) >= r.every {
		r.last = time.Now()
		r.fn(r.p)
	}
}

func (r *progressReporter) finish() Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fn != nil {
		r.fn(r.p)
	}
	return r.p
}

// segmentSize is the span of a file that one cutter chunks on its own, so
// that large files are cut on every core. Chunk boundaries restart at each
// segment's start; for snapshots of one template the segments line up, and
// elsewhere only the chunks at segment edges differ.
const segmentSize = 256 << 20

// segment is a span of a file for one cutter.
type segment struct {
	file   int // index in Snapshot.Files
	index  int // index among the file's segments
	offset int64
	length int64
}

// chunkLists collects the chunk ids of every segment, which cutters fill in
// in parallel, a segment each.
type chunkLists struct {
	mu       sync.Mutex
	segments [][][]string    // file -> segment -> chunk ids
	taken    map[string]bool // chunks sent for storing in this run
	left     []int           // segments not yet cut, per file
}

// add appends a chunk's id to its segment's list and tells whether this
// cutter should store it: it is neither in the repository nor taken by
// another cutter.
func (l *chunkLists) add(seg segment, id string, stored bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := &l.segments[seg.file][seg.index]
	*ids = append(*ids, id)
	if stored || l.taken[id] {
		return false
	}
	l.taken[id] = true
	return true
}

// segmentDone tells whether seg was its file's last segment to be cut.
func (l *chunkLists) segmentDone(seg segment) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left[seg.file]--
	return l.left[seg.file] == 0
}

// splitFiles cuts every file into segments.
func splitFiles(files []store.File) ([]segment, *chunkLists) {
	lists := &chunkLists{taken: map[string]bool{}, segments: make([][][]string, len(files)), left: make([]int, len(files))}
	var segs []segment
	for i, f := range files {
		n := int(max(1, (f.Size+segmentSize-1)/segmentSize))
		lists.segments[i] = make([][]string, n)
		lists.left[i] = n
		for j := range n {
			off := int64(j) * segmentSize
			segs = append(segs, segment{file: i, index: j, offset: off, length: min(segmentSize, f.Size-off)})
		}
	}
	return segs, lists
}

// Save stores the snapshot folder dir under name: every chunk not already in
// the repository is compressed and packed, each pack and its index are
// written, and the snapshot's manifest last. Saving a name that exists is
// refused. An interrupted Save leaves no snapshot; run again, it skips the
// chunks already stored.
func Save(ctx context.Context, repo *store.Repository, name, dir string, opts Options) (*store.Snapshot, error) {
	m, err := snapshot.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot folder %s: %w", dir, err)
	}
	return SaveManifest(ctx, repo, name, dir, m, opts)
}

// SaveManifest is Save of a snapshot folder whose manifest the caller holds
// (the one Commit just wrote): the file list and sizes come from m, so the
// folder is not listed or its files stat'ed again.
func SaveManifest(ctx context.Context, repo *store.Repository, name, dir string, m *snapshot.Manifest, opts Options) (*store.Snapshot, error) {
	if err := repo.CheckNewName(ctx, name); err != nil {
		return nil, err
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	snap := &store.Snapshot{Name: name, CreatedAt: time.Now().UTC(), Meta: meta}
	for _, f := range m.Files {
		snap.Files = append(snap.Files, store.File{Path: f.Path, Size: f.Size, Mode: f.Mode})
	}

	unlock, err := repo.Lock(ctx, false)
	if err != nil {
		return nil, err
	}
	defer unlock()

	rep := newReporter(opts, Progress{Snapshot: name, Files: len(snap.Files), Bytes: m.Size()})
	if err := ingest(ctx, repo, dir, snap, opts, rep); err != nil {
		return nil, fmt.Errorf("store %s: save %s: %w", repo.Backend().Location(), name, err)
	}
	rep.finish()
	if err := repo.AddSnapshot(ctx, snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// ingest runs the pipeline: cutters (one per core) each take a file segment
// and cut and hash its chunks, handing those the repository lacks to the
// packer through a lane of their own, which compresses each on the
// cutter's goroutine (while it is still in that core's cache) into the
// cutter's own pack, so that a pack holds a stretch of one file, in order;
// the packer uploads the packs.
func ingest(ctx context.Context, repo *store.Repository, dir string, snap *store.Snapshot, opts Options, rep *progressReporter) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	packer, err := repo.NewPacker(pctx, opts.Uploads, func(n int64) { rep.add(0, n, 0) })
	if err != nil {
		return err
	}
	segs, lists := splitFiles(snap.Files)
	todo := make(chan segment, len(segs))
	for _, seg := range segs {
		todo <- seg
	}
	close(todo)
	g, gctx := errgroup.WithContext(pctx)
	for range min(runtime.GOMAXPROCS(0), len(segs)) {
		g.Go(func() error {
			c := segmentCutter{repo: repo, dir: dir, snap: snap, lists: lists, packs: packer.Lane(), rep: rep, scan: make([]byte, repo.ChunkerBufferSize()), followed: opts.Followed}
			for seg := range todo {
				if err := c.cut(gctx, seg); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// A cutter's error is the first failure: a failed packer's reaches
	// the cutters through Add. Either way the packer is stopped.
	if err := g.Wait(); err != nil {
		cancel()
		_ = packer.Close()
		return err
	}
	if err := packer.Close(); err != nil {
		return err
	}
	for i := range snap.Files {
		for _, ids := range lists.segments[i] {
			snap.Files[i].Chunks = append(snap.Files[i].Chunks, ids...)
		}
	}
	return nil
}

// segmentCutter is one cutter goroutine's state: its scan buffer and its
// lane into the packer serve every segment it takes.
type segmentCutter struct {
	repo     *store.Repository
	dir      string
	snap     *store.Snapshot
	lists    *chunkLists
	packs    *store.PackLane
	rep      *progressReporter
	scan     []byte
	followed *Follower
}

// cut chunks one segment of a file; every chunk the repository lacks goes
// to the packer. A segment the image's follower cut (Options.Followed) is
// taken as it was cut.
func (c *segmentCutter) cut(ctx context.Context, seg segment) error {
	f := c.snap.Files[seg.file]
	if ids, ok := c.followed.segment(f.Path, seg.index, seg.offset, seg.length); ok && c.allStored(ids) {
		for _, id := range ids {
			c.lists.add(seg, id, true)
		}
		c.rep.add(seg.length, 0, 0)
	} else {
		err := c.chunk(ctx, f.Path, seg.offset, seg.length, nil, func(id string) bool {
			return c.lists.add(seg, id, c.repo.HasChunk(id))
		})
		if err != nil {
			return err
		}
	}
	if c.lists.segmentDone(seg) {
		c.rep.add(0, 0, 1)
	}
	return nil
}

// allStored says whether the repository holds every chunk of ids.
func (c *segmentCutter) allStored(ids []string) bool {
	for _, id := range ids {
		if !c.repo.HasChunk(id) {
			return false
		}
	}
	return true
}

// chunk cuts length bytes of file path (a slash path in the folder) from
// offset on, read through tee when set, and hands each chunk's id to keep:
// the chunks it keeps go to the packer.
func (c *segmentCutter) chunk(ctx context.Context, path string, offset, length int64, tee func(io.Reader) io.Reader, keep func(id string) bool) error {
	fh, err := os.Open(filepath.Join(c.dir, filepath.FromSlash(path)))
	if err != nil {
		return err
	}
	defer fh.Close()
	var r io.Reader = io.NewSectionReader(fh, offset, length)
	if tee != nil {
		r = tee(r)
	}
	chunks, err := c.repo.NewChunker(r, c.scan)
	if err != nil {
		return err
	}
	var read int64
	for {
		data, err := chunks.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		read += int64(len(data))
		sum := sha256.Sum256(data)
		id := hex.EncodeToString(sum[:])
		if keep(id) {
			if err := c.packs.Add(ctx, id, data); err != nil {
				return err
			}
		}
		c.rep.add(int64(len(data)), 0, 0)
	}
	if read != length {
		return fmt.Errorf("%s changed while it was saved: read %d bytes at %d, expected %d", path, read, offset, length)
	}
	return nil
}
