package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
)

// HasChunk tells whether chunk id (the hex SHA-256 of its bytes) is stored.
func (r *Repository) HasChunk(id string) bool {
	_, ok := r.lookup(id)
	return ok
}

// ChunkInfo is a stored chunk's sizes.
type ChunkInfo struct {
	// Raw is the chunk's own size, Stored its compressed size in its pack.
	Raw, Stored int64
}

// Chunk tells the sizes of stored chunk id.
func (r *Repository) Chunk(id string) (ChunkInfo, bool) {
	loc, ok := r.lookup(id)
	return ChunkInfo{Raw: loc.Raw, Stored: loc.Length}, ok
}

// Packer stores new chunks: each is compressed by the goroutine that adds
// it (while its bytes are still in that core's cache) straight into the
// pack being filled, and the packs are written by a few uploaders. Chunks
// are added through lanes (Lane), one per adding goroutine, each filling
// packs of its own: a pack then holds a stretch of one file in the file's
// order rather than pieces of every stretch being cut at once, so a pull
// that reads a file in order needs its packs one after another (with one
// packer for all, the chunks of a file's first 256 MiB were spread over
// the packs of its first 4 GiB on 16 cores, and a restore reading the
// memory image as it arrived waited for all of them: docs/benchmarks.md,
// session 21). A chunk counts as stored (HasChunk) once its pack and that
// pack's index are written. Memory stays bounded whatever is stored: packs
// come from a free list as deep as the lanes and uploads.
type Packer struct {
	r   *Repository
	ctx context.Context
	g   *errgroup.Group
	enc *zstd.Encoder
	// coders group the bytes of chunks zstd cannot shrink (format 3);
	// nil in older formats.
	coders  *freeList[*groupedCoder]
	pool    *freeList[*packWriter]
	packs   chan *packWriter
	written func(int64)

	mu    sync.Mutex
	lanes []*PackLane
}

// NewPacker starts a packer with uploads packs written at once
// (DefaultUploads when zero or less); written, when set, is told the size of
// each pack written. Close must follow, after the last Add has returned.
func (r *Repository) NewPacker(ctx context.Context, uploads int, written func(int64)) (*Packer, error) {
	workers := runtime.GOMAXPROCS(0)
	if uploads <= 0 {
		uploads = DefaultUploads()
	}
	// No frame checksum: every chunk read back is checked against its SHA-256.
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(workers), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, err
	}
	// Packs are reused through a free list as deep as the pipeline (a
	// pack filling in each lane of a cutter per core, those queued and
	// being uploaded): allocating them afresh for a 10 GB image keeps the
	// garbage collector busier than the chunker. (A sync.Pool is emptied
	// by every collection, which is the problem.) A pack's capacity allows
	// one chunk past the pack size, so its buffer never moves.
	capacity := r.cfg.PackSize + int64(enc.MaxEncodedSize(r.maxChunk()))
	g, gctx := errgroup.WithContext(ctx)
	p := &Packer{
		r: r, ctx: gctx, g: g, enc: enc, written: written,
		pool:  newFreeList(workers+uploads+2, func() *packWriter { return newPackWriter(capacity) }),
		packs: make(chan *packWriter, 1),
	}
	if r.cfg.Version >= 3 {
		p.coders = newFreeList(workers, func() *groupedCoder { return &groupedCoder{} })
	}
	for range uploads {
		g.Go(func() error {
			for pw := range p.packs {
				n, err := r.writePack(gctx, pw)
				if err != nil {
					return err
				}
				if p.written != nil {
					p.written(n)
				}
				pw.reset()
				p.pool.put(pw)
			}
			return nil
		})
	}
	return p, nil
}

// PackLane is one goroutine's way into a Packer: the chunks it adds fill
// packs of their own, in the order added. A lane is not for use by
// several goroutines at once.
type PackLane struct {
	p  *Packer
	pw *packWriter // the pack being filled; nil until the next Add
}

// Lane opens a lane; Close hands on the pack each lane was filling.
func (p *Packer) Lane() *PackLane {
	l := &PackLane{p: p}
	p.mu.Lock()
	p.lanes = append(p.lanes, l)
	p.mu.Unlock()
	return l
}

// Add compresses chunk data, whose id the caller computed, into the
// lane's pack, and queues the pack for writing once it is full. The
// caller adds each new chunk once, in any lane. After a failure of the
// packer, Add returns that failure.
func (l *PackLane) Add(ctx context.Context, id string, data []byte) error {
	p := l.p
	if l.pw == nil {
		pw, err := p.pool.get(p.ctx)
		if err != nil {
			return context.Cause(p.ctx)
		}
		l.pw = pw
	}
	pw := l.pw
	at := len(pw.buf)
	compressed := p.enc.EncodeAll(data, pw.buf[at:at])
	if p.coders != nil && len(compressed) > len(data)-len(data)/groupedTry {
		var err error
		if compressed, err = p.group(data, compressed); err != nil {
			return err
		}
	}
	pw.add(id, int64(len(data)), compressed)
	if int64(len(pw.buf)) < p.r.cfg.PackSize {
		return nil
	}
	l.pw = nil
	return p.send(ctx, pw)
}

// send queues a pack for an uploader.
func (p *Packer) send(ctx context.Context, pw *packWriter) error {
	select {
	case p.packs <- pw:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.ctx.Done():
		return context.Cause(p.ctx)
	}
}

// groupedTry: a chunk whose zstd frame saves less than 1/groupedTry of its
// bytes is grouped too (weights, which zstd leaves as they are); one that
// zstd shrinks more (code, zeros, text) is not, sparing the second pass.
const groupedTry = 8

// group returns data's grouped bytes in compressed's array when they are
// smaller than compressed, its zstd frame, and compressed otherwise.
func (p *Packer) group(data, compressed []byte) ([]byte, error) {
	g, err := p.coders.get(p.ctx)
	if err != nil {
		return nil, context.Cause(p.ctx)
	}
	defer p.coders.put(g)
	grouped := g.encode(g.out[:0], data)
	g.out = grouped
	if len(grouped) >= len(compressed) {
		return compressed, nil
	}
	return append(compressed[:0], grouped...), nil
}

// Close queues the pack each lane was filling, writes what is queued and
// waits for every upload; its error is the packer's first failure. It
// must come after the last Add has returned.
func (p *Packer) Close() error {
	var err error
	p.mu.Lock()
	lanes := p.lanes
	p.mu.Unlock()
	for _, l := range lanes {
		if l.pw != nil && len(l.pw.index.Blobs) > 0 && err == nil {
			err = p.send(p.ctx, l.pw)
		}
		l.pw = nil
	}
	close(p.packs)
	if werr := p.g.Wait(); werr != nil {
		err = werr
	}
	p.enc.Close()
	return err
}

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

// add records chunk id (raw bytes before compression) whose stored bytes
// are compressed: those the buffer holds past its length, where the chunk
// was compressed into (the capacity allows one chunk past the pack size),
// or, where an encoder had to grow them elsewhere, a copy.
func (p *packWriter) add(id string, raw int64, compressed []byte) {
	at := len(p.buf)
	p.index.Blobs = append(p.index.Blobs, packEntry{ID: id, Offset: int64(at), Length: int64(len(compressed)), Raw: raw})
	if n := len(compressed); n > 0 && cap(p.buf)-at >= n && &p.buf[:at+1][at] == &compressed[0] {
		p.buf = p.buf[:at+n]
		return
	}
	p.buf = append(p.buf, compressed...)
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

// DefaultUploads is how many packs a push writes at once unless told: one
// per core, 4 to 16. A remote store answers each upload after a round trip
// and its own work (an S3 server hashes and writes the body): on the H200
// machine's 16 cores a push to S3 on loopback took 2.0x the local folder's
// time with 4 uploads, 1.25x with 8 and 1.1-1.2x with 16, while the local
// folder's did not change (docs/benchmarks.md). Each upload holds a pack of
// up to 24 MiB.
func DefaultUploads() int { return min(max(runtime.GOMAXPROCS(0), 4), 16) }
