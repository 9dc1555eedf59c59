// Package staging keeps the staged copies of stored snapshots on this
// node, within a disk budget.
package staging

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Staged copies are whole copies of stored snapshots on this node, made
// before any actor needs them (a fleet agent stages its templates' golden
// snapshots), so that an actor started from one here reads no store: it
// resumes from the copy as from a snapshot of its own. They live in
// DATA/staged/NAME, each a snapshot folder (manifest last; every block is
// hashed while a resume reads it, and a copy found corrupt is removed and
// the store read instead), within a disk budget (stasisd --stage-budget): the
// copies used longest ago make room, never one a resume is reading.
type Copies struct {
	dir, tmp string
	budget   int64

	mu sync.Mutex
	// inUse counts the resumes reading each copy.
	inUse map[string]int
	// pulling is closed when the pull of that name ends.
	pulling map[string]chan struct{}
}

// New keeps the staged copies under dataDir within budget bytes (0:
// staging is off), removing what a pull cut short left.
func New(dataDir string, budget int64) (*Copies, error) {
	st := &Copies{dir: filepath.Join(dataDir, "staged"), tmp: filepath.Join(dataDir, "staging"), budget: budget, inUse: map[string]int{}, pulling: map[string]chan struct{}{}}
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

// List reads the staged copies (Info), with the resumes reading each.
func (st *Copies) List() ([]api.StagedSnapshot, error) {
	entries, err := os.ReadDir(st.dir)
	if err != nil {
		return nil, fmt.Errorf("staged copies: %w", err)
	}
	out := []api.StagedSnapshot{}
	for _, e := range entries {
		c, err := Info(e.Name(), filepath.Join(st.dir, e.Name()))
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

// Info describes the whole copy of the stored snapshot name in dir:
// its manifest's size, its last use (the folder's modification time,
// touched by each use).
func Info(name, dir string) (api.StagedSnapshot, error) {
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

// Use takes the staged copy of name for a resume: its folder, and the
// release to call when the resume no longer reads it.
func (st *Copies) Use(name string) (string, func(), bool) {
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

// Drop removes a staged copy found damaged, unless a resume reads it.
func (st *Copies) Drop(name string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.inUse[name] == 0 {
		_ = os.RemoveAll(filepath.Join(st.dir, name))
	}
}

// MakeRoom removes the copies used longest ago, none in use, until size
// more bytes fit in the budget, or says what is short.
func (st *Copies) MakeRoom(size int64) error {
	if size > st.budget {
		return errdefs.Mark(fmt.Errorf("the snapshot is %s, more than the whole budget for staged copies, %s (stasisd --stage-budget)", units.Bytes(size), units.Bytes(st.budget)), errdefs.ErrResourceExhausted)
	}
	copies, err := st.List()
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

// Stage makes a staged copy of the stored snapshot name, unless there is
// one, or elsewhere finds another whole copy of it on this node (either is
// answered at once, Already). pull fetches it
// into a folder of its own, which becomes the copy once whole; it calls
// MakeRoom before any chunk moves. Calls for the same name share one pull.
func (st *Copies) Stage(ctx context.Context, name string, elsewhere func(ctx context.Context, name string) (dir string, release func(), ok bool), pull func(ctx context.Context, into string) error) (api.StagedSnapshot, error) {
	if err := store.CheckSnapshotName(name); err != nil {
		return api.StagedSnapshot{}, err
	}
	if st.budget <= 0 {
		return api.StagedSnapshot{}, fmt.Errorf("%w: staging is off on this node (stasisd --stage-budget 0)", errdefs.ErrFailedPrecondition)
	}
	for {
		dir, release, ok := st.Use(name)
		if !ok {
			dir, release, ok = elsewhere(ctx, name)
		}
		if ok {
			release()
			c, err := Info(name, dir)
			c.Already = true
			return c, err
		}
		st.mu.Lock()
		wait, busy := st.pulling[name]
		if !busy {
			done := make(chan struct{})
			st.pulling[name] = done
			st.mu.Unlock()
			err := st.pull(ctx, name, pull)
			st.mu.Lock()
			delete(st.pulling, name)
			close(done)
			st.mu.Unlock()
			if err != nil {
				return api.StagedSnapshot{}, err
			}
			return Info(name, filepath.Join(st.dir, name))
		}
		st.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return api.StagedSnapshot{}, ctx.Err()
		}
	}
}

// pull runs pull into a folder of its own, then moves it into place.
func (st *Copies) pull(ctx context.Context, name string, pull func(ctx context.Context, into string) error) error {
	tmp, err := os.MkdirTemp(st.tmp, "pull-")
	if err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	if err := pull(ctx, filepath.Join(tmp, "copy")); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "copy"), filepath.Join(st.dir, name)); err != nil {
		return fmt.Errorf("stage %s: %w", name, err)
	}
	return nil
}
