package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/snapshot"
)

// Restore writes stored snapshot name into dir, which must be empty or
// absent: every chunk is fetched, decompressed and checked against its hash,
// and the folder's manifest is written last, so dir becomes a snapshot
// folder only when it is whole. On failure dir is emptied again.
func (r *Repository) Restore(ctx context.Context, name, dir string, opts Options) error {
	s, err := r.Snapshot(ctx, name)
	if err != nil {
		return err
	}
	return r.RestoreSnapshot(ctx, s, dir, opts)
}

// RestoreSnapshot is Restore of a stored manifest the caller read already
// (with Snapshot, to check it before fetching anything).
func (r *Repository) RestoreSnapshot(ctx context.Context, s *Snapshot, dir string, opts Options) (err error) {
	name := s.Name
	// Every chunk must be known, and add up to its file, before anything
	// is written.
	if err := r.checkChunks(s); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("restore into %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("restore into %s: the folder holds %d entries; restore into an empty folder", dir, len(entries))
	}
	defer func() {
		if err != nil {
			_ = fsutil.RemoveContents(dir)
		}
	}()
	downloads := opts.Downloads
	if downloads <= 0 {
		downloads = 8
	}
	chunks, err := r.newChunkReader(downloads)
	if err != nil {
		return err
	}
	defer chunks.close()
	rep := newReporter(opts, Progress{Snapshot: name, Files: len(s.Files), Bytes: s.Size()})

	for _, f := range s.Files {
		if err := r.restoreFile(ctx, f, dir, chunks, downloads, rep); err != nil {
			return fmt.Errorf("store %s: snapshot %s: %w", r.be.Location(), name, err)
		}
		rep.add(0, 0, 1)
	}
	rep.finish()
	// The folder becomes a snapshot when its manifest appears, whole.
	if err := fsutil.WriteAtomic(filepath.Join(dir, snapshot.ManifestName), bytes.NewReader(s.Meta), int64(len(s.Meta))); err != nil {
		return err
	}
	_, err = snapshot.Load(dir)
	return err
}

func (r *Repository) restoreFile(ctx context.Context, f File, dir string, chunks *chunkReader, downloads int, rep *progressReporter) error {
	path := filepath.Join(dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(f.Mode)&0o777)
	if err != nil {
		return err
	}
	defer out.Close()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(downloads)
	var offset int64
	for i, id := range f.Chunks {
		loc, _ := r.lookup(id)
		at := offset
		offset += loc.Raw
		g.Go(func() error {
			err := chunks.read(ctx, id, loc, func(data []byte) error {
				_, err := out.WriteAt(data, at)
				return err
			})
			if err != nil {
				return fmt.Errorf("file %s: chunk %d: %w", f.Path, i, err)
			}
			rep.add(loc.Raw, loc.Length, 0)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// chunkReader fetches chunks and proves each is the chunk its id names, at
// most parallel at once, reusing its buffers: allocating two fresh buffers
// per chunk of a 10 GB restore kept the garbage collector and the page
// fault handler busier than the hashing.
type chunkReader struct {
	r    *Repository
	dec  *zstd.Decoder
	bufs *freeList[*chunkBuffers]
}

type chunkBuffers struct{ compressed, raw []byte }

func (r *Repository) newChunkReader(parallel int) (*chunkReader, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(parallel), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return nil, err
	}
	return &chunkReader{r: r, dec: dec, bufs: newFreeList(parallel, func() *chunkBuffers { return &chunkBuffers{} })}, nil
}

func (c *chunkReader) close() { c.dec.Close() }

// maxStoredChunk bounds what an index entry may claim for a chunk; more is
// corrupt, and reading it would only exhaust memory.
const maxStoredChunk = 2 * maxChunkSize

// read fetches chunk id and passes its bytes, valid during the call only,
// to use (when not nil).
func (c *chunkReader) read(ctx context.Context, id string, loc blobLocation, use func([]byte) error) error {
	if loc.Length <= 0 || loc.Length > maxStoredChunk || loc.Raw < 0 || loc.Raw > maxStoredChunk {
		return fmt.Errorf("chunk %s: the index of pack %s claims %d stored and %d raw bytes (corrupt)", id, loc.Pack, loc.Length, loc.Raw)
	}
	b, err := c.bufs.get(ctx)
	if err != nil {
		return err
	}
	defer c.bufs.put(b)
	rc, err := c.r.be.Get(ctx, packKey(loc.Pack), loc.Offset, loc.Length)
	if errors.Is(err, ErrNotExist) {
		return fmt.Errorf("pack %s is missing: %w", loc.Pack, err)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	b.compressed = slices.Grow(b.compressed[:0], int(loc.Length))[:loc.Length]
	if n, err := io.ReadFull(rc, b.compressed); errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("pack %s is truncated: %d of %d bytes at offset %d", loc.Pack, n, loc.Length, loc.Offset)
	} else if err != nil {
		return fmt.Errorf("pack %s: %w", loc.Pack, err)
	}
	data, err := c.dec.DecodeAll(b.compressed, slices.Grow(b.raw[:0], int(loc.Raw)))
	if err != nil {
		return fmt.Errorf("chunk %s in pack %s does not decompress (corrupt): %w", id, loc.Pack, err)
	}
	b.raw = data[:0]
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != id || int64(len(data)) != loc.Raw {
		return fmt.Errorf("chunk %s in pack %s does not match its hash (corrupt)", id, loc.Pack)
	}
	if use == nil {
		return nil
	}
	return use(data)
}
