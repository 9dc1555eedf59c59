package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// suspendData copies the actor's durable folders, with the sandbox paused so
// the copy is consistent, then stops the sandbox.
func (e *Engine) suspendData(ctx context.Context, o op, a Actor, dir string) (m *snapshot.Manifest, err error) {
	var sources map[string]string
	err = o.step(StepPreflight, func() (string, error) {
		if len(a.DurableDirs) == 0 {
			return "", fmt.Errorf("%w: a Data snapshot needs durable folders, and the actor declares none", ErrRefused)
		}
		var err error
		if sources, err = durableSources(a); err != nil {
			return "", err
		}
		if st, err := e.Runtime.State(ctx, a.ID); err != nil {
			return "", err
		} else if st.Status != runtime.StatusRunning {
			return "", fmt.Errorf("%w: the sandbox is %s, not running", ErrRefused, st.Status)
		}
		if err := prepareDir(dir); err != nil {
			return "", err
		}
		var need uint64
		for _, src := range sources {
			n, err := treeSize(ctx, src)
			if err != nil {
				return "", err
			}
			need += n
		}
		free, err := e.freeDisk(dir)
		if err != nil {
			return "", err
		}
		if free < need {
			return "", fmt.Errorf("%w: the snapshot folder %s has %s free, the durable folders hold %s: %s short", ErrRefused, dir, units.Bytes(free), units.Bytes(need), units.Bytes(need-free))
		}
		return fmt.Sprintf("durable folders hold %s", units.Bytes(need)), nil
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		// A committed snapshot (m set) is whole and is kept even when a
		// later step fails.
		if err != nil && m == nil {
			_ = fsutil.RemoveContents(dir)
		}
	}()
	if err := o.step(StepPause, func() (string, error) { return "", e.Runtime.Pause(ctx, a.ID) }); err != nil {
		return nil, err
	}
	manifest := snapshot.Manifest{Scope: snapshot.ScopeData, Actor: a.Label(), Runtime: e.runtimeInfo(nil), DurableDirs: map[string]string{}}
	copyErr := o.step(StepCopy, func() (string, error) {
		for i, d := range a.DurableDirs {
			rel := "data/" + strconv.Itoa(i)
			if err := copyTree(ctx, sources[d], filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
				return "", fmt.Errorf("durable folder %s: %w", d, err)
			}
			manifest.DurableDirs[d] = rel
		}
		return "", nil
	})
	// The sandbox runs on whatever the copy did; resume it with a context
	// that outlives the caller's.
	cctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if err := o.undo(StepUnpause, func() (string, error) { return "", e.Runtime.Unpause(cctx, a.ID) }); err != nil {
		return nil, errors.Join(copyErr, err)
	}
	if copyErr != nil {
		return nil, copyErr
	}
	err = o.step(StepCommit, func() (string, error) {
		var err error
		m, err = snapshot.Commit(ctx, dir, manifest)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d files synced and hashed", len(m.Files)), nil
	})
	if err != nil {
		return nil, err
	}
	if err := e.stop(ctx, o, a.ID); err != nil {
		return m, fmt.Errorf("snapshot %s was committed, but %w; the actor keeps running", dir, err)
	}
	return m, nil
}

// restoreDurable replaces each durable folder's host contents with its copy
// in the snapshot. The new contents are built beside the folder and swapped
// in, so a failure (or a cancelled ctx) leaves the folder as it was.
func restoreDurable(ctx context.Context, a Actor, dir string, m *snapshot.Manifest) error {
	sources, err := durableSources(a)
	if err != nil {
		return err
	}
	for d, rel := range m.DurableDirs {
		src, ok := sources[d]
		if !ok {
			return fmt.Errorf("%w: the snapshot keeps durable folder %s, which the actor's bundle no longer mounts", ErrRefused, d)
		}
		staging := src + ".stasis-restore"
		old := src + ".stasis-old"
		_ = os.RemoveAll(staging)
		if err := copyTree(ctx, filepath.Join(dir, filepath.FromSlash(rel)), staging); err != nil {
			_ = os.RemoveAll(staging)
			return fmt.Errorf("durable folder %s: %w", d, err)
		}
		_ = os.RemoveAll(old)
		if err := os.Rename(src, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("durable folder %s: %w", d, err)
		}
		if err := os.Rename(staging, src); err != nil {
			_ = os.Rename(old, src)
			return fmt.Errorf("durable folder %s: %w", d, err)
		}
		_ = os.RemoveAll(old)
	}
	return nil
}

// copyTree copies the regular files and folders under src into dst, which
// must not exist. Symlinks and special files are refused: a snapshot holds
// data, not references to places outside it. A cancelled ctx stops it at
// the next file.
func copyTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case !d.Type().IsRegular():
			return fmt.Errorf("%w: %s is %s; durable folders may hold only files and folders", ErrRefused, p, fsutil.DescribeType(d.Type()))
		}
		return fsutil.CopyFile(p, target, info.Mode().Perm())
	})
}

func treeSize(ctx context.Context, dir string) (uint64, error) {
	var n uint64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += uint64(info.Size())
		}
		return nil
	})
	return n, err
}
