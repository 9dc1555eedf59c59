package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/transfer"
)

// Staged copies are whole copies of stored snapshots on this node, made
// before any actor needs them (a fleet agent stages its templates' golden
// snapshots), so that an actor started from one here reads no store: it
// resumes from the copy as from a snapshot of its own. They live in
// DATA/staged/NAME, each a snapshot folder (manifest last; every block is
// hashed while a resume reads it, and a copy found corrupt is removed and
// the store read instead), within a disk budget (Config.StageBudget): the
// copies used longest ago make room, never one a resume is reading.
type stager struct {
	dir, tmp string
	budget   int64

	mu sync.Mutex
	// inUse counts the resumes reading each copy.
	inUse map[string]int
	// pulling is closed when the pull of that name ends.
	pulling map[string]chan struct{}
}

func newStager(dataDir string, budget int64) (*stager, error) {
	st := &stager{dir: filepath.Join(dataDir, "staged"), tmp: filepath.Join(dataDir, "staging"), budget: budget, inUse: map[string]int{}, pulling: map[string]chan struct{}{}}
	// A pull a crash cut short left a folder here; nothing uses it.
	if err := os.RemoveAll(st.tmp); err != nil {
		return nil, fmt.Errorf("staged copies: %w", err)
	}
	for _, d := range []string{st.dir, st.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("staged copies: %w", err)
		}
	}
	return st, nil
}

// list reads the staged copies (copyInfo), with the resumes reading each.
func (st *stager) list() ([]api.StagedSnapshot, error) {
	entries, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("staged copies: %w", err)
	}
	out := []api.StagedSnapshot{}
	for _, e := range entries {
		c, err := copyInfo(e.Name(), filepath.Join(st.dir, e.Name()))
		if err != nil {
			continue
		}
		st.mu.Lock()
		c.InUse = st.inUse[e.Name()]
		st.mu.Unlock()
		out = append(out, c)
	}
	return out, nil
}

// copyInfo describes the whole copy of the stored snapshot name in dir:
// its manifest's size, its last use (the folder's modification time,
// touched by each use).
func copyInfo(name, dir string) (api.StagedSnapshot, error) {
	m, err := snapshot.Load(dir)
	if err != nil {
		return api.StagedSnapshot{}, fmt.Errorf("copy of %s: %w", name, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return api.StagedSnapshot{}, fmt.Errorf("copy of %s: %w", name, err)
	}
	return api.StagedSnapshot{Name: name, Dir: dir, SizeBytes: m.Size(), UsedAt: fi.ModTime()}, nil
}

// use takes the staged copy of name for a resume: its folder, and the
// release to call when the resume no longer reads it.
func (st *stager) use(name string) (string, func(), bool) {
	dir := filepath.Join(st.dir, name)
	if store.CheckSnapshotName(name) != nil {
		return "", nil, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, snapshot.ManifestName)); err != nil {
		return "", nil, false
	}
	st.inUse[name]++
	now := time.Now()
	_ = os.Chtimes(dir, now, now)
	return dir, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.inUse[name]--; st.inUse[name] <= 0 {
			delete(st.inUse, name)
		}
	}, true
}

// drop removes a staged copy found damaged, unless a resume reads it.
func (st *stager) drop(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inUse[name] == 0 {
		_ = os.RemoveAll(filepath.Join(st.dir, name))
	}
}

// makeRoom removes the copies used longest ago, none in use, until size
// more bytes fit in the budget, or says what is short.
func (st *stager) makeRoom(size int64) error {
	if size > st.budget {
		return errdefs.Mark(fmt.Errorf("the snapshot is %s, more than the whole budget for staged copies, %s (stasisd --stage-budget)", units.Bytes(size), units.Bytes(st.budget)), errdefs.ErrResourceExhausted)
	}
	copies, err := st.list()
	if err != nil {
		return err
	}
	slices.SortFunc(copies, func(a, b api.StagedSnapshot) int { return a.UsedAt.Compare(b.UsedAt) })
	var held int64
	for _, c := range copies {
		held += c.SizeBytes
	}
	for _, c := range copies {
		if held+size <= st.budget {
			break
		}
		st.mu.Lock()
		if st.inUse[c.Name] == 0 {
			if err := os.RemoveAll(c.Dir); err == nil {
				held -= c.SizeBytes
			}
		}
		st.mu.Unlock()
	}
	if held+size > st.budget {
		return errdefs.Mark(fmt.Errorf("the snapshot is %s and the staged copies in use hold %s of the %s budget (stasisd --stage-budget)", units.Bytes(size), units.Bytes(held), units.Bytes(st.budget)), errdefs.ErrResourceExhausted)
	}
	return nil
}

// Stage makes a staged copy of the stored snapshot name on this node: its
// manifest is checked against this node first (a snapshot this node could
// not restore is refused, failed_precondition, and nothing is fetched),
// then it is pulled, every chunk hash-checked, within the budget. A copy
// already here, staged or the node's own (a golden snapshot it made), is
// answered at once. Calls for the same name share one pull.
func (s *Service) Stage(ctx context.Context, name string) (api.StagedSnapshot, error) {
	st := s.stager
	if err := store.CheckSnapshotName(name); err != nil {
		return api.StagedSnapshot{}, err
	}
	if st.budget <= 0 {
		return api.StagedSnapshot{}, fmt.Errorf("%w: staging is off on this node (stasisd --stage-budget 0)", errdefs.ErrFailedPrecondition)
	}
	for {
		if dir, release, ok := s.localCopy(ctx, name); ok {
			release()
			c, err := copyInfo(name, dir)
			c.Already = true
			return c, err
		}
		st.mu.Lock()
		wait, busy := st.pulling[name]
		if !busy {
			done := make(chan struct{})
			st.pulling[name] = done
			st.mu.Unlock()
			err := s.pullStaged(ctx, name)
			st.mu.Lock()
			delete(st.pulling, name)
			close(done)
			st.mu.Unlock()
			if err != nil {
				return api.StagedSnapshot{}, err
			}
			return copyInfo(name, filepath.Join(st.dir, name))
		}
		st.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return api.StagedSnapshot{}, ctx.Err()
		}
	}
}

func (s *Service) pullStaged(ctx context.Context, name string) error {
	st := s.stager
	repo, err := s.store.get()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(st.tmp, "pull-")
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	// A cache of the store, as a pulled copy is: hashed on every use.
	var refused error
	from := transfer.Stored{Repo: repo, Name: name, Options: archiver.Options{NoSync: true}}
	p, err := transfer.Fetch(ctx, from, filepath.Join(tmp, "copy"), func(m *snapshot.Manifest) error {
		// Staged for any actor that may start from it: a GPU snapshot
		// for a GPU actor.
		if _, err := s.engineForSnapshot(m).Compatible(ctx, engine.Actor{Name: name, GPU: m.GPU != nil}, m); err != nil {
			refused = fmt.Errorf("stored snapshot %s: %w", name, err)
		} else if err := st.makeRoom(m.Size()); err != nil {
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
	if err := os.Rename(filepath.Join(tmp, "copy"), filepath.Join(st.dir, name)); err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	s.cfg.Log.Info("staged a stored snapshot", "snapshot", name, "bytes", p.Bytes, "fetched", p.Fetched, "took", time.Since(start).String())
	return nil
}

// StagedSnapshots lists the staged copies on this node.
func (s *Service) StagedSnapshots(context.Context) ([]api.StagedSnapshot, error) {
	return s.stager.list()
}

// localCopy is a whole copy of the stored snapshot name on this node that
// any actor may resume from: a staged copy, or the node's own golden
// snapshot stored under that name (a golden folder lives as long as its
// template, which no actor may outlive). release ends its use.
func (s *Service) localCopy(ctx context.Context, name string) (dir string, release func(), ok bool) {
	if dir, release, ok := s.stager.use(name); ok {
		return dir, release, true
	}
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
func (s *Service) resumeLocalCopy(ctx context.Context, o *operation, a engine.Actor, name string, opts engine.ResumeOptions) (*snapshot.Manifest, bool, error) {
	dir, release, ok := s.localCopy(ctx, name)
	if !ok {
		return nil, false, nil
	}
	o.note(fmt.Sprintf("%s is on this node (%s): resuming from it, nothing fetched", name, dir))
	m, err := s.engineOf(o.actor).Resume(ctx, a, dir, opts)
	release()
	if errors.Is(err, errdefs.ErrCorrupt) || errors.Is(err, snapshot.ErrNoManifest) {
		s.stager.drop(name)
		o.note(fmt.Sprintf("the copy of %s on this node cannot be used (%v); fetching the stored one", name, err))
		return nil, false, nil
	}
	return m, true, err
}
