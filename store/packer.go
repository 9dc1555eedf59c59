package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"runtime"

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
// it (while its bytes are still in that core's cache), packed with others
// into packs of the repository's pack size, and written by a few uploaders.
// A chunk counts as stored (HasChunk) once its pack and that pack's index
// are written. Memory stays bounded whatever is stored: every stage hands
// on through short channels and reused buffers.
type Packer struct {
	r     *Repository
	ctx   context.Context
	g     *errgroup.Group
	enc   *zstd.Encoder
	zpool *freeList[*[]byte]
	// coders group the bytes of chunks zstd cannot shrink (format 3);
	// nil in older formats.
	coders  *freeList[*groupedCoder]
	blobs   chan blob
	written func(int64)
}

type blob struct {
	id         string
	compressed []byte
	buf        *[]byte // returned to the pool once packed
	raw        int64
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
	// Buffers are reused through free lists as deep as the pipeline:
	// allocating compressed chunks and packs afresh for a 10 GB image keeps
	// the garbage collector busier than the chunker. (A sync.Pool is emptied
	// by every collection, which is the problem.)
	maxBlob := enc.MaxEncodedSize(r.maxChunk())
	packPool := newFreeList(uploads+2, func() *packWriter { return newPackWriter(r.cfg.PackSize + int64(maxBlob)) })
	g, gctx := errgroup.WithContext(ctx)
	p := &Packer{
		r: r, ctx: gctx, g: g, enc: enc, written: written,
		zpool: newFreeList(2*workers+2, func() *[]byte { b := make([]byte, 0, maxBlob); return &b }),
		blobs: make(chan blob, workers),
	}
	if r.cfg.Version >= 3 {
		p.coders = newFreeList(workers, func() *groupedCoder { return &groupedCoder{} })
	}
	packs := make(chan *packWriter, 1)
	g.Go(func() error {
		defer close(packs)
		pw, err := packPool.get(gctx)
		if err != nil {
			return err
		}
		for b := range p.blobs {
			pw.add(b)
			p.zpool.put(b.buf)
			if int64(len(pw.buf)) >= r.cfg.PackSize {
				select {
				case packs <- pw:
				case <-gctx.Done():
					return gctx.Err()
				}
				if pw, err = packPool.get(gctx); err != nil {
					return err
				}
			}
		}
		if len(pw.index.Blobs) > 0 {
			select {
			case packs <- pw:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	for range uploads {
		g.Go(func() error {
			for pw := range packs {
				n, err := r.writePack(gctx, pw)
				if err != nil {
					return err
				}
				if p.written != nil {
					p.written(n)
				}
				pw.reset()
				packPool.put(pw)
			}
			return nil
		})
	}
	return p, nil
}

// Add compresses chunk data, whose id the caller computed, and queues it.
// Many goroutines may add at once; the caller adds each new chunk once.
// After a failure of the packer, Add returns that failure.
func (p *Packer) Add(ctx context.Context, id string, data []byte) error {
	zbuf, err := p.zpool.get(p.ctx)
	if err != nil {
		return context.Cause(p.ctx)
	}
	compressed := p.enc.EncodeAll(data, (*zbuf)[:0])
	if p.coders != nil && len(compressed) > len(data)-len(data)/groupedTry {
		if compressed, err = p.group(data, compressed); err != nil {
			return err
		}
	}
	b := blob{id: id, raw: int64(len(data)), compressed: compressed, buf: zbuf}
	select {
	case p.blobs <- b:
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

// Close writes what is queued and waits for every upload; its error is the
// packer's first failure.
func (p *Packer) Close() error {
	close(p.blobs)
	err := p.g.Wait()
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

// DefaultUploads is how many packs a push writes at once unless told: one
// per core, 4 to 16. A remote store answers each upload after a round trip
// and its own work (an S3 server hashes and writes the body): on the H200
// machine's 16 cores a push to S3 on loopback took 2.0x the local folder's
// time with 4 uploads, 1.25x with 8 and 1.1-1.2x with 16, while the local
// folder's did not change (docs/benchmarks.md). Each upload holds a pack of
// up to 24 MiB.
func DefaultUploads() int { return min(max(runtime.GOMAXPROCS(0), 4), 16) }
