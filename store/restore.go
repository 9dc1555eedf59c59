package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/snapshot"
)

// Restore writes stored snapshot name into dir, which must be empty or
// absent: every chunk is fetched, decompressed and checked against its hash,
// and the folder's manifest is written last, so dir becomes a snapshot
// folder only when it is whole. On failure dir is emptied again.
func (r *Repository) Restore(ctx context.Context, name, dir string, opts Options) (err error) {
	s, err := r.Snapshot(ctx, name)
	if err != nil {
		return err
	}
	// Every chunk must be known before anything is written.
	if err := r.unindexed(s); err != nil {
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
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(downloads), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return err
	}
	defer dec.Close()
	rep := newReporter(opts, Progress{Snapshot: name, Files: len(s.Files), Bytes: s.Size()})

	for _, f := range s.Files {
		if err := r.restoreFile(ctx, s, f, dir, dec, downloads, rep); err != nil {
			return fmt.Errorf("store %s: snapshot %s: %w", r.be.Location(), name, err)
		}
		rep.add(0, 0, 1)
	}
	rep.finish()
	if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestName), s.Meta, 0o600); err != nil {
		return err
	}
	_, err = snapshot.Load(dir)
	return err
}

func (r *Repository) restoreFile(ctx context.Context, s *Snapshot, f File, dir string, dec *zstd.Decoder, downloads int, rep *progressReporter) error {
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
		if offset > f.Size {
			return fmt.Errorf("file %s: its chunks hold more than its %d bytes", f.Path, f.Size)
		}
		g.Go(func() error {
			data, err := r.readChunk(ctx, id, loc, dec)
			if err != nil {
				return fmt.Errorf("file %s: chunk %d: %w", f.Path, i, err)
			}
			if _, err := out.WriteAt(data, at); err != nil {
				return err
			}
			rep.add(int64(len(data)), loc.Length, 0)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if offset != f.Size {
		return fmt.Errorf("file %s: its chunks hold %d bytes, the manifest says %d", f.Path, offset, f.Size)
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// readChunk fetches one chunk and proves it is the chunk its id names.
func (r *Repository) readChunk(ctx context.Context, id string, loc blobLocation, dec *zstd.Decoder) ([]byte, error) {
	rc, err := r.be.Get(ctx, packKey(loc.Pack), loc.Offset, loc.Length)
	if errors.Is(err, ErrNotExist) {
		return nil, fmt.Errorf("pack %s is missing: %w", loc.Pack, err)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	compressed, err := io.ReadAll(io.LimitReader(rc, loc.Length))
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", loc.Pack, err)
	}
	if int64(len(compressed)) != loc.Length {
		return nil, fmt.Errorf("pack %s is truncated: %d of %d bytes at offset %d", loc.Pack, len(compressed), loc.Length, loc.Offset)
	}
	data, err := dec.DecodeAll(compressed, make([]byte, 0, loc.Raw))
	if err != nil {
		return nil, fmt.Errorf("chunk %s in pack %s does not decompress (corrupt): %w", id, loc.Pack, err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != id || int64(len(data)) != loc.Raw {
		return nil, fmt.Errorf("chunk %s in pack %s does not match its hash (corrupt)", id, loc.Pack)
	}
	return data, nil
}
