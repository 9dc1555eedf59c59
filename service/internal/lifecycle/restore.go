package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/templates"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// restore brings snap back into a's sandbox and returns its manifest and
// the folder of the actor's own copy ("" when none): from its folder on
// this node, hashed while it restores; or from a copy this node holds for
// any actor (localCopy: staged, or its own golden snapshot), resumed where
// it is; or, when neither is here, pulled from the store (transfer.PullAndResume: its stored manifest
// checked against this node before any byte moves, every chunk hash-checked
// on arrival) and, when recordCopy, recorded as here once pulled (a caller
// that records snap itself says false). A local copy whose manifest
// is damaged is refused with the cause, unless a stored copy can replace
// it.
func (s *Actors) restore(ctx context.Context, o *op.Operation, a engine.Actor, snap journal.Snapshot, p api.Probe, recordCopy bool) (*snapshot.Manifest, string, error) {
	opts := engine.ResumeOptions{Probe: templates.Probe(p), Verify: engine.VerifyWhileRestoring, Observer: o.Observer()}
	dir := snap.Dir
	if dir != "" {
		// A copy pulled here a moment ago may still be being written.
		s.pulled.wait(ctx, dir)
		// The engine reads the manifest (once); a copy it finds missing or
		// corrupt is fetched again where the store holds the snapshot: a
		// copy of a stored snapshot is a cache (a pull does not wait for
		// its bytes to reach the disk, and every later use hashes them).
		m, err := s.engines.Of(o.Actor).Resume(ctx, a, dir, opts)
		incomplete := errors.Is(err, snapshot.ErrNoManifest)
		if err == nil || !incomplete && !errors.Is(err, errdefs.ErrCorrupt) {
			return m, dir, err
		}
		if snap.Stored == "" || !s.store.Configured() {
			if incomplete {
				return nil, "", fmt.Errorf("%w: snapshot %s at %s is incomplete (%v), and it is in no store", errdefs.ErrNotFound, snap.ID, dir, err)
			}
			return nil, "", fmt.Errorf("snapshot %s is damaged on this node and in no store: %w", snap.ID, err)
		}
		o.Note(fmt.Sprintf("the copy of %s on this node cannot be used (%v); fetching the stored one", snap.ID, err))
	}
	if snap.Stored != "" {
		// A copy this node holds for any actor (staged, or its own golden
		// snapshot) is resumed from where it is.
		if m, used, err := s.resumeLocalCopy(ctx, o, a, snap.Stored, opts); used {
			return m, "", err
		}
	}
	if snap.Stored == "" || !s.store.Configured() {
		return nil, "", fmt.Errorf("%w: snapshot %s is neither on this node nor in a store", errdefs.ErrNotFound, snap.ID)
	}
	repo, err := s.store.Get()
	if err != nil {
		return nil, "", fmt.Errorf("snapshot %s is not on this node: %w", snap.ID, err)
	}
	dir = s.snapshotDir(snap.ID)
	if err := s.removeDir(dir); err != nil {
		return nil, "", err
	}
	from := s.stored(repo, o, snap.Stored, transfer.StepPull)
	from.Options.NoSync, from.Options.Seeds = true, s.seeds(ctx, repo, snap)
	if !s.cfg.PullWhole {
		from.Views = s.viewsDir()
		from.Options.Stage = s.pullMemory.Stage
	}
	pull, err := transfer.PullAndResume(ctx, s.engines.Of(o.Actor), a, dir, from, opts)
	if pull == nil {
		// Nothing a later resume could take is left behind.
		_ = s.removeDir(dir)
		return nil, "", err
	}
	// The memory image may still be being written from memory: until its
	// manifest is there, a resume from the folder finds it incomplete and
	// pulls again.
	s.pulled.add(dir, pull, func(werr error) {
		// A folder removed while it was written (its actor deleted) is
		// no news.
		if werr != nil && !errors.Is(werr, context.Canceled) {
			s.cfg.Log.Warn("a pulled copy was not written; a later resume pulls it again", "snapshot", snap.ID, "folder", dir, "err", werr)
		}
	})
	if recordCopy {
		// Later resumes use the pulled copy.
		snap.Dir = dir
		if jerr := s.journal.PutSnapshot(context.WithoutCancel(ctx), snap); jerr != nil && err == nil {
			err = jerr
		}
	}
	if err != nil {
		return nil, "", err
	}
	return pull.Manifest, dir, nil
}

// maxSeeds bounds the local copies a pull copies from: each costs a read
// of its stored manifest.
const maxSeeds = 4

// seeds are the newest local copies of stored snapshots of snap's template
// on this node (pulled or pushed here): a pull of snap copies the chunks
// they share (the template's weights, its libraries) rather than fetching
// them again.
func (s *Actors) seeds(ctx context.Context, repo *store.Repository, snap journal.Snapshot) []archiver.Seed {
	all, err := s.journal.Snapshots(ctx, "")
	if err != nil {
		return nil
	}
	var seeds []archiver.Seed
	for _, c := range all {
		if len(seeds) == maxSeeds {
			break
		}
		if c.Template != snap.Template || c.Dir == "" || c.Stored == "" || c.ID == snap.ID {
			continue
		}
		// A copy still being written from memory is there in a moment;
		// its chunks are not fetched again.
		s.pulled.wait(ctx, c.Dir)
		if st, err := repo.Snapshot(ctx, c.Stored); err == nil {
			seeds = append(seeds, archiver.Seed{Dir: c.Dir, Snapshot: st})
		}
	}
	// The staged copies (golden snapshots, mostly: the weights and
	// libraries every actor of their template shares).
	staged, _ := s.staged.List()
	for _, c := range staged {
		if len(seeds) == maxSeeds {
			break
		}
		if st, err := repo.Snapshot(ctx, c.Name); err == nil && c.Name != snap.Stored {
			seeds = append(seeds, archiver.Seed{Dir: c.Dir, Snapshot: st})
		}
	}
	return seeds
}

// stored is snapshot name in repo, its progress reported in o's history as
// verb.
func (s *Actors) stored(repo *store.Repository, o *op.Operation, name, verb string) transfer.Stored {
	return transfer.Stored{Repo: repo, Name: name, Options: s.transferEvents(o, verb)}
}

// transferEvents reports a transfer's progress in the actor's history,
// every 10% or so.
func (s *Actors) transferEvents(o *op.Operation, verb string) archiver.Options {
	last := -1
	return archiver.Options{Progress: func(p archiver.Progress) {
		if p.Bytes <= 0 {
			return
		}
		tenth := int(p.BytesDone * 10 / p.Bytes)
		if tenth == last {
			return
		}
		last = tenth
		o.Progress(verb, fmt.Sprintf("%s of %s", units.Bytes(p.BytesDone), units.Bytes(p.Bytes)))
	}}
}
