package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// Verify checks what Restore checks of the named snapshots (all when none
// are named): every chunk indexed and adding up to its file, then read and
// checked against its hash. Checking all of them also fails on every
// damaged index or manifest, after checking the rest.
func (r *Repository) Verify(ctx context.Context, names ...string) error {
	var snaps []*Snapshot
	var damaged error
	if len(names) == 0 {
		var bad []Damage
		var err error
		if snaps, bad, err = r.snapshots(ctx); err != nil {
			return err
		}
		damaged = r.damage(bad)
	}
	for _, name := range names {
		s, err := r.Snapshot(ctx, name)
		if err != nil {
			return err
		}
		snaps = append(snaps, s)
	}
	chunks, err := r.NewChunkReader(8, 8)
	if err != nil {
		return err
	}
	defer chunks.Close()
	for _, s := range snaps {
		if err := r.CheckChunks(s); err != nil {
			return err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		checked := map[string]bool{}
		for _, f := range s.Files {
			for i, id := range f.Chunks {
				if checked[id] {
					continue
				}
				checked[id] = true
				g.Go(func() error {
					if err := chunks.Read(gctx, id, nil); err != nil {
						return fmt.Errorf("store %s: snapshot %s: file %s: chunk %d: %w", r.be.Location(), s.Name, f.Path, i, err)
					}
					return nil
				})
			}
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	return damaged
}

// Usage is what DU reports.
type Usage struct {
	Snapshots int `json:"snapshots"`
	// Damaged counts the objects (indexes, manifests) that cannot be
	// read, which the other figures leave out.
	Damaged int `json:"damaged,omitempty"`
	// Logical is the bytes of every file of every snapshot.
	Logical int64 `json:"logical"`
	// Unique is the bytes of the distinct chunks the snapshots use.
	Unique int64 `json:"unique"`
	// Stored is the bytes of every pack in the backend.
	Stored int64 `json:"stored"`
	Packs  int   `json:"packs"`
	// Dedup is Logical over Stored.
	Dedup float64 `json:"dedup"`
}

// DU compares what the snapshots hold with what the backend stores.
func (r *Repository) DU(ctx context.Context) (Usage, error) {
	var u Usage
	snaps, bad, err := r.snapshots(ctx)
	if err != nil {
		return u, err
	}
	u.Damaged = len(bad) + len(r.DamagedIndexes())
	seen := map[string]bool{}
	for _, s := range snaps {
		u.Snapshots++
		u.Logical += s.Size()
		for _, f := range s.Files {
			for _, id := range f.Chunks {
				if !seen[id] {
					seen[id] = true
					loc, _ := r.lookup(id)
					u.Unique += loc.Raw
				}
			}
		}
	}
	err = r.be.List(ctx, dataPrefix, func(_ string, size int64) error {
		u.Stored += size
		u.Packs++
		return nil
	})
	if u.Stored > 0 {
		u.Dedup = float64(u.Logical) / float64(u.Stored)
	}
	return u, err
}

// GCResult is what GC removed.
type GCResult struct {
	PacksDeleted int   `json:"packsDeleted"`
	BytesFreed   int64 `json:"bytesFreed"`
	PacksKept    int   `json:"packsKept"`
	StaleLocks   int   `json:"staleLocks"`
}

// GC deletes the packs that no snapshot uses, and packs left without an
// index by an interrupted Save. It holds the exclusive lock, so no writer
// runs meanwhile (see lock.go). A pack that any snapshot uses in part is
// kept whole.
func (r *Repository) GC(ctx context.Context) (GCResult, error) {
	var res GCResult
	unlock, err := r.Lock(ctx, true)
	if err != nil {
		return res, err
	}
	defer unlock()
	if err := r.loadIndex(ctx); err != nil {
		return res, err
	}
	used := map[string]bool{} // packs
	snaps, bad, err := r.snapshots(ctx)
	if err != nil {
		return res, err
	}
	// A damaged manifest may use any pack, and a damaged index hides
	// which chunks its pack holds: deleting anything could lose a
	// snapshot.
	if err := r.damage(bad); err != nil {
		return res, fmt.Errorf("gc refused, nothing was deleted: %w (delete the damaged manifests with stasis store rm, or put the objects back)", err)
	}
	for _, s := range snaps {
		for _, f := range s.Files {
			for _, id := range f.Chunks {
				if loc, ok := r.lookup(id); ok {
					used[loc.Pack] = true
				}
			}
		}
	}
	var drop []string
	err = r.be.List(ctx, dataPrefix, func(key string, size int64) error {
		pack := key[strings.LastIndex(key, "/")+1:]
		if used[pack] {
			res.PacksKept++
			return nil
		}
		drop = append(drop, pack)
		res.BytesFreed += size
		return nil
	})
	if err != nil {
		return res, err
	}
	for _, pack := range drop {
		// The index goes first: a chunk must never be indexed in a pack
		// that is gone.
		if err := r.be.Delete(ctx, indexPrefix+pack); err != nil {
			return res, err
		}
		if err := r.be.Delete(ctx, packKey(pack)); err != nil {
			return res, err
		}
		res.PacksDeleted++
	}
	// Indexes whose pack is missing (a pack deleted by hand) are dropped.
	err = r.be.List(ctx, indexPrefix, func(key string, _ int64) error {
		pack := key[len(indexPrefix):]
		if _, err := r.be.Size(ctx, packKey(pack)); errors.Is(err, ErrNotExist) {
			return r.be.Delete(ctx, key)
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	err = r.be.List(ctx, locksPrefix, func(key string, _ int64) error {
		var lf lockFile
		if err := getJSON(ctx, r.be, key, &lf); err != nil || time.Since(lf.Time) <= staleLockAge {
			return nil
		}
		res.StaleLocks++
		return r.be.Delete(ctx, key)
	})
	if err != nil {
		return res, err
	}
	if err := r.loadIndex(ctx); err != nil {
		return res, err
	}
	return res, nil
}
