package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// Stage makes a staged copy of the stored snapshot name on this node
// (package staging): its manifest is checked against this node first (a
// snapshot this node could not restore is refused, failed_precondition,
// and nothing is fetched), then it is pulled, every chunk hash-checked,
// within the budget. A copy already here, staged or the node's own (a
// golden snapshot it made), is answered at once. Calls for the same name
// share one pull.
func (s *Actors) Stage(ctx context.Context, name string) (api.StagedSnapshot, error) {
	return s.staged.Stage(ctx, name, s.goldenCopy, func(ctx context.Context, into string) error {
		return s.pullStaged(ctx, name, into)
	})
}

// pullStaged pulls the stored snapshot name into the folder into.
func (s *Actors) pullStaged(ctx context.Context, name, into string) error {
	repo, err := s.store.Get()
	if err != nil {
		return err
	}
	start := time.Now()
	// A cache of the store, as a pulled copy is: hashed on every use.
	var refused error
	from := transfer.Stored{Repo: repo, Name: name, Options: archiver.Options{NoSync: true}}
	p, err := transfer.Fetch(ctx, from, into, func(m *snapshot.Manifest) error {
		// Staged for any actor that may start from it: a GPU snapshot
		// for a GPU actor.
		if _, err := s.engines.ForSnapshot(m).Compatible(ctx, engine.Actor{Name: name, GPU: m.GPU != nil}, m); err != nil {
			refused = fmt.Errorf("stored snapshot %s: %w", name, err)
		} else if err := s.staged.MakeRoom(m.Size()); err != nil {
			refused = fmt.Errorf("stage %s: %w", name, err)
		}
		return refused
	})
	if err != nil && err != refused {
		err = fmt.Errorf("stage %s: %w", name, err)
	}
	if err != nil {
		return err
	}
	s.cfg.Log.Info("staged a stored snapshot", "snapshot", name, "bytes", p.Bytes, "fetched", p.Fetched, "took", time.Since(start).String())
	return nil
}

// StagedSnapshots lists the staged copies on this node.
func (s *Actors) StagedSnapshots(context.Context) ([]api.StagedSnapshot, error) {
	return s.staged.List()
}

// localCopy is a whole copy of the stored snapshot name on this node that
// any actor may resume from: a staged copy, or the node's own golden
// snapshot stored under that name (a golden folder lives as long as its
// template, which no actor may outlive). release ends its use.
func (s *Actors) localCopy(ctx context.Context, name string) (dir string, release func(), ok bool) {
	if dir, release, ok := s.staged.Use(name); ok {
		return dir, release, true
	}
	return s.goldenCopy(ctx, name)
}

// goldenCopy is the folder of this node's own golden snapshot stored as
// name, when it is whole.
func (s *Actors) goldenCopy(ctx context.Context, name string) (dir string, release func(), ok bool) {
	all, err := s.journal.Snapshots(ctx, "")
	if err != nil {
		return "", nil, false
	}
	for _, c := range all {
		if c.Stored == name && c.Kind == string(api.KindGolden) && c.Dir != "" {
			if _, err := os.Stat(filepath.Join(c.Dir, snapshot.ManifestName)); err == nil {
				return c.Dir, func() {}, true
			}
		}
	}
	return "", nil, false
}

// resumeLocalCopy resumes a from a whole copy of the stored snapshot name
// on this node, when there is one (localCopy): the manifest, and whether
// it did. A copy found corrupt is dropped and not used (false, nil): the
// store has the snapshot whole.
func (s *Actors) resumeLocalCopy(ctx context.Context, o *op.Operation, a engine.Actor, name string, opts engine.ResumeOptions) (*snapshot.Manifest, bool, error) {
	dir, release, ok := s.localCopy(ctx, name)
	if !ok {
		return nil, false, nil
	}
	o.Note(fmt.Sprintf("%s is on this node (%s): resuming from it, nothing fetched", name, dir))
	m, err := s.engines.Of(o.Actor).Resume(ctx, a, dir, opts)
	release()
	if errors.Is(err, errdefs.ErrCorrupt) || errors.Is(err, snapshot.ErrNoManifest) {
		s.staged.Drop(name)
		o.Note(fmt.Sprintf("the copy of %s on this node cannot be used (%v); fetching the stored one", name, err))
		return nil, false, nil
	}
	return m, true, err
}
