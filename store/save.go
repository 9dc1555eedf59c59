package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
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

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/snapshot"
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
	// Uploads bounds the packs written at once (Save), Downloads the chunks
	// read at once (Restore); 4 and 8 when zero.
	Uploads   int
	Downloads int
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
func splitFiles(files []File) ([]segment, *chunkLists) {
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

type blob struct {
	id         string
	compressed []byte
	buf        *[]byte // returned to the pool once packed
	raw        int64
}

// Save stores the snapshot folder dir under name: every chunk not already in
// the repository is compressed and packed, each pack and its index are
// written, and the snapshot's manifest last. Saving a name that exists is
// refused. An interrupted Save leaves no snapshot; run again, it skips the
// chunks already stored.
func (r *Repository) Save(ctx context.Context, name, dir string, opts Options) (*Snapshot, error) {
	m, err := snapshot.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot folder %s: %w", dir, err)
	}
	return r.SaveManifest(ctx, name, dir, m, opts)
}

// SaveManifest is Save of a snapshot folder whose manifest the caller holds
// (the one Commit just wrote): the file list and sizes come from m, so the
// folder is not listed or its files stat'ed again.
func (r *Repository) SaveManifest(ctx context.Context, name, dir string, m *snapshot.Manifest, opts Options) (*Snapshot, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if _, err := r.be.Size(ctx, snapshotsPrefix+name); err == nil {
		return nil, fmt.Errorf("store %s: snapshot %q exists already; delete it first or pick another name: %w", r.be.Location(), name, errdefs.ErrAlreadyExists)
	} else if !errors.Is(err, ErrNotExist) {
		return nil, err
	}
	meta, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	snap := &Snapshot{Version: manifestVersion, Name: name, CreatedAt: time.Now().UTC(), Meta: meta}
	for _, f := range m.Files {
		snap.Files = append(snap.Files, File{Path: f.Path, Size: f.Size, Mode: f.Mode})
	}

	unlock, err := r.lock(ctx, false)
	if err != nil {
		return nil, err
	}
	defer unlock()

	rep := newReporter(opts, Progress{Snapshot: name, Files: len(snap.Files), Bytes: m.Size()})
	if err := r.ingest(ctx, dir, snap, opts, rep); err != nil {
		return nil, fmt.Errorf("store %s: save %s: %w", r.be.Location(), name, err)
	}
	rep.finish()
	if err := putJSON(ctx, r.be, snapshotsPrefix+name, snap); err != nil {
		return nil, err
	}
	return snap, nil
}

// ingest runs the pipeline: cutters (one per core) each take a file segment
// and cut, hash and compress its chunks, skipping those already stored; a
// packer fills packs; uploaders write them. Each chunk is hashed and
// compressed by the cutter that found it, while it is still in that core's
// cache and without a copy. Channels between stages are short, so memory
// stays bounded whatever the snapshot's size.
func (r *Repository) ingest(ctx context.Context, dir string, snap *Snapshot, opts Options, rep *progressReporter) error {
	workers := runtime.GOMAXPROCS(0)
	uploads := opts.Uploads
	if uploads <= 0 {
		uploads = 4
	}
	// No frame checksum: every chunk read back is checked against its SHA-256.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(workers), zstd.WithEncoderCRC(false))
	if err != nil {
		return err
	}
	defer enc.Close()
	// Buffers are reused through free lists as deep as the pipeline:
	// allocating compressed chunks and packs afresh for a 10 GB image keeps
	// the garbage collector busier than the chunker. (A sync.Pool is emptied
	// by every collection, which is the problem.)
	maxBlob := enc.MaxEncodedSize(r.maxChunk())
	zpool := newFreeList(2*workers+2, func() *[]byte { b := make([]byte, 0, maxBlob); return &b })
	packPool := newFreeList(uploads+2, func() *packWriter { return newPackWriter(r.cfg.PackSize + int64(maxBlob)) })

	g, ctx := errgroup.WithContext(ctx)
	blobs := make(chan blob, workers)
	packs := make(chan *packWriter, 1)

	segs, lists := splitFiles(snap.Files)
	todo := make(chan segment, len(segs))
	for _, seg := range segs {
		todo <- seg
	}
	close(todo)
	var cutters sync.WaitGroup
	for range min(workers, len(segs)) {
		cutters.Add(1)
		g.Go(func() error {
			defer cutters.Done()
			c := segmentCutter{r: r, dir: dir, snap: snap, lists: lists, enc: enc, zpool: zpool, out: blobs, rep: rep, scan: make([]byte, r.scanBufferSize())}
			for seg := range todo {
				if err := c.cut(ctx, seg); err != nil {
					return err
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		cutters.Wait()
		close(blobs)
		return nil
	})
	g.Go(func() error {
		defer close(packs)
		pw, err := packPool.get(ctx)
		if err != nil {
			return err
		}
		for b := range blobs {
			pw.add(b)
			zpool.put(b.buf)
			if int64(len(pw.buf)) >= r.cfg.PackSize {
				select {
				case packs <- pw:
				case <-ctx.Done():
					return ctx.Err()
				}
				if pw, err = packPool.get(ctx); err != nil {
					return err
				}
			}
		}
		if len(pw.index.Blobs) > 0 {
			select {
			case packs <- pw:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	for range uploads {
		g.Go(func() error {
			for pw := range packs {
				n, err := r.writePack(ctx, pw)
				if err != nil {
					return err
				}
				rep.add(0, n, 0)
				pw.reset()
				packPool.put(pw)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for i := range snap.Files {
		for _, ids := range lists.segments[i] {
			snap.Files[i].Chunks = append(snap.Files[i].Chunks, ids...)
		}
	}
	return nil
}

// segmentCutter is one cutter goroutine's state: its scan buffer is reused
// for every segment it takes.
type segmentCutter struct {
	r     *Repository
	dir   string
	snap  *Snapshot
	lists *chunkLists
	enc   *zstd.Encoder
	zpool *freeList[*[]byte]
	out   chan<- blob
	rep   *progressReporter
	scan  []byte
}

// cut chunks one segment of a file; every chunk the repository lacks goes
// out compressed.
func (c *segmentCutter) cut(ctx context.Context, seg segment) error {
	f := c.snap.Files[seg.file]
	fh, err := os.Open(filepath.Join(c.dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return err
	}
	defer fh.Close()
	chunks, err := c.r.newCutter(io.NewSectionReader(fh, seg.offset, seg.length), c.scan)
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
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		read += int64(len(data))
		sum := sha256.Sum256(data)
		id := hex.EncodeToString(sum[:])
		_, stored := c.r.lookup(id)
		if c.lists.add(seg, id, stored) {
			zbuf, err := c.zpool.get(ctx)
			if err != nil {
				return err
			}
			b := blob{id: id, raw: int64(len(data)), compressed: c.enc.EncodeAll(data, (*zbuf)[:0]), buf: zbuf}
			select {
			case c.out <- b:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		c.rep.add(int64(len(data)), 0, 0)
	}
	if read != seg.length {
		return fmt.Errorf("%s changed while it was saved: read %d bytes at %d, expected %d", f.Path, read, seg.offset, seg.length)
	}
	if c.lists.segmentDone(seg) {
		c.rep.add(0, 0, 1)
	}
	return nil
}

// freeList hands out reusable values: up to size of them exist, each made
// when first needed, and a get while all are out waits for a put, so the
// pipeline's buffers stay within the sizes ingest gives, whatever the pace
// of its stages.
type freeList[T any] struct {
	free  chan T
	make  chan struct{} // a token for each value that may still be made
	fresh func() T
}

func newFreeList[T any](size int, fresh func() T) *freeList[T] {
	f := &freeList[T]{free: make(chan T, size), make: make(chan struct{}, size), fresh: fresh}
	for range size {
		f.make <- struct{}{}
	}
	return f
}

func (f *freeList[T]) get(ctx context.Context) (T, error) {
	select {
	case v := <-f.free:
		return v, nil
	default:
	}
	select {
	case v := <-f.free:
		return v, nil
	case <-f.make:
		return f.fresh(), nil
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// put returns a value; it never blocks, since no more values exist than
// the list holds.
func (f *freeList[T]) put(v T) { f.free <- v }

// packWriter builds one pack: the compressed blobs back to back, in memory
// that starts on a block boundary so that the local backend writes it to
// disk without a copy.
type packWriter struct {
	buf   []byte
	index packIndex
}

func newPackWriter(capacity int64) *packWriter {
	return &packWriter{buf: fsutil.AlignedBuffer(int(capacity))[:0]}
}

func (p *packWriter) reset() {
	p.buf = p.buf[:0]
	p.index = packIndex{}
}

// add appends b; the capacity allows one blob past the pack size, so the
// buffer never moves.
func (p *packWriter) add(b blob) {
	p.index.Blobs = append(p.index.Blobs, packEntry{ID: b.id, Offset: int64(len(p.buf)), Length: int64(len(b.compressed)), Raw: b.raw})
	p.buf = append(p.buf, b.compressed...)
}

// memReader reads a byte slice; Bytes gives what is left to read, so that a
// backend can take the bytes from memory (fsutil.WriteAtomicDirect does).
type memReader struct {
	*bytes.Reader
	b []byte
}

func newMemReader(b []byte) memReader { return memReader{bytes.NewReader(b), b} }

func (m memReader) Bytes() []byte { return m.b[len(m.b)-m.Len():] }

// packID names a pack by the SHA-256 of its index entries: each chunk's id,
// offset, stored and raw length. The chunk ids are hashes of the chunks'
// bytes, and every chunk read back is checked against its id, so the name
// covers all that a pack gives back; hashing the pack's own bytes as well
// was a quarter of a 2-core ingest's CPU.
func packID(entries []packEntry) string {
	h := sha256.New()
	var b [24]byte
	for _, e := range entries {
		h.Write([]byte(e.ID))
		binary.BigEndian.PutUint64(b[0:], uint64(e.Offset))
		binary.BigEndian.PutUint64(b[8:], uint64(e.Length))
		binary.BigEndian.PutUint64(b[16:], uint64(e.Raw))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writePack writes the pack, then its index; only then do its chunks count
// as stored.
func (r *Repository) writePack(ctx context.Context, p *packWriter) (int64, error) {
	id := packID(p.index.Blobs)
	p.index.Pack = id
	if err := r.be.Put(ctx, packKey(id), newMemReader(p.buf), int64(len(p.buf))); err != nil {
		return 0, fmt.Errorf("write pack %s: %w", id, err)
	}
	if err := putJSON(ctx, r.be, indexPrefix+id, p.index); err != nil {
		return 0, err
	}
	r.mu.Lock()
	for _, b := range p.index.Blobs {
		r.index[b.ID] = blobLocation{Pack: id, Offset: b.Offset, Length: b.Length, Raw: b.Raw}
	}
	r.mu.Unlock()
	return int64(len(p.buf)), nil
}
