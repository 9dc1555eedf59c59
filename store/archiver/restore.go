package archiver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

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
	return RestoreSnapshot(ctx, repo, s, dir, opts)
}

// RestoreSnapshot is Restore of a stored manifest the caller read already
// (with Snapshot, to check it before fetching anything).
func RestoreSnapshot(ctx context.Context, repo *store.Repository, s *store.Snapshot, dir string, opts Options) (err error) {
	name := s.Name
	// Every chunk must be known, and add up to its file, before anything
	// is written.
	if err := repo.CheckChunks(s); err != nil {
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
	chunks, err := repo.NewChunkReader(downloads)
	if err != nil {
		return err
	}
	defer chunks.Close()
	rep := newReporter(opts, Progress{Snapshot: name, Files: len(s.Files), Bytes: s.Size()})

	for _, f := range s.Files {
		if err := restoreFile(ctx, repo, f, dir, chunks, downloads, rep); err != nil {
			return fmt.Errorf("store %s: snapshot %s: %w", repo.Backend().Location(), name, err)
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

func restoreFile(ctx context.Context, repo *store.Repository, f store.File, dir string, chunks *store.ChunkReader, downloads int, rep *progressReporter) error {
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
		c, _ := repo.Chunk(id)
		at := offset
		offset += c.Raw
		g.Go(func() error {
			err := chunks.Read(ctx, id, func(data []byte) error {
				_, err := out.WriteAt(data, at)
				return err
			})
			if err != nil {
				return fmt.Errorf("file %s: chunk %d: %w", f.Path, i, err)
			}
			rep.add(c.Raw, c.Stored, 0)
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
