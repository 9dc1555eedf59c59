package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/runscid"
	"github.com/stasis-run/stasis/runtime"
)

// Checkpoint saves the container into opts.ImageDir, which must be empty or
// absent: runsc creates image files exclusively and fails on leftovers.
func (r *Runsc) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	if err := emptyDir(opts.ImageDir); err != nil {
		return err
	}
	args := []string{"checkpoint", "--image-path", opts.ImageDir}
	if opts.LeaveRunning {
		args = append(args, "--leave-running")
	}
	for _, o := range []struct {
		on, can bool
		flag    string
	}{
		{opts.CUDACheckpointPath != "", r.features.CudaCheckpointPath, "--cuda-checkpoint-path=" + opts.CUDACheckpointPath},
		{opts.CUDACheckpointSequential, r.features.CudaCheckpointSequential, "--cuda-checkpoint-sequential"},
		{opts.Direct, r.features.Direct, "--direct"},
		{opts.ExcludeZeroPages, r.features.ExcludeCommittedZeroPages, "--exclude-committed-zero-pages"},
	} {
		if !o.on {
			continue
		}
		if !o.can {
			name, _, _ := strings.Cut(o.flag, "=")
			return fmt.Errorf("runsc %s (%s) has no checkpoint %s: use a newer runsc (scripts/install-runsc.sh)", r.path, r.features.Version, name)
		}
		args = append(args, o.flag)
	}
	_, err := r.run(ctx, invocation{args: append(args, id), container: id, talks: true})
	return err
}

// Restore creates container id from a checkpoint image and runs it.
func (r *Runsc) Restore(ctx context.Context, id string, opts runtime.RestoreOptions) error {
	if err := r.CheckNewID(id); err != nil {
		return err
	}
	gpu, err := IsGPUBundle(opts.Bundle)
	if err != nil {
		return err
	}
	r.notifyGPU(gpu, opts.Notify)
	bundleDir := opts.Bundle
	if len(opts.Env) > 0 {
		if bundleDir, err = r.restoreBundle(id, opts.Bundle, opts.Env); err != nil {
			return err
		}
	}
	args := []string{"restore", "--image-path", opts.ImageDir, "--bundle", bundleDir, "--detach"}
	if opts.Background {
		if !r.features.Background {
			return fmt.Errorf("runsc at %s cannot restore in the background (no restore -background); restore eagerly instead", r.path)
		}
		args = append(args, "--background")
	}
	if opts.Direct {
		if !r.features.Direct {
			return fmt.Errorf("runsc %s (%s) has no restore --direct: use a newer runsc (scripts/install-runsc.sh)", r.path, r.features.Version)
		}
		args = append(args, "--direct")
	}
	return r.startSandbox(ctx, id, opts.Bundle, invocation{args: append(args, id), gpu: gpu}, opts.ConsoleLog)
}

// restoreBundle writes the bundle a restore of id runs with when it adds
// environment: the actor's spec, its root made absolute, with env added to
// its process (runsc lets the environment differ across a restore). It
// lives in runsc's state folder until the container is deleted.
func (r *Runsc) restoreBundle(id, bundleDir string, env []string) (string, error) {
	spec, err := bundle.Load(bundleDir)
	if err != nil {
		return "", err
	}
	if spec.Root != nil && !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(bundleDir, spec.Root.Path)
	}
	if spec.Process != nil {
		spec.Process.Env = append(append([]string(nil), spec.Process.Env...), env...)
	}
	dir := r.restoreBundleDir(id)
	if dir == "" {
		return "", fmt.Errorf("container id %q: use letters, digits, '_', '+', '.' and '-'", id)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := bundle.Save(dir, spec); err != nil {
		return "", err
	}
	return dir, nil
}

// restoreBundleDir is where restoreBundle writes id's bundle; "" for an id
// runsc would refuse anyway (so no path is built from it).
func (r *Runsc) restoreBundleDir(id string) string {
	if !runscid.Valid(id) {
		return ""
	}
	return filepath.Join(r.cfg.Root, "stasis-restore", id)
}

// emptyDir makes dir if it is absent and refuses it if it holds anything.
func emptyDir(dir string) error {
	if dir == "" {
		return errors.New("checkpoint: no image folder given")
	}
	err := fsutil.MkdirEmpty(dir)
	if errors.Is(err, fsutil.ErrNotEmpty) {
		return fmt.Errorf("checkpoint image folder %s is not empty: runsc needs a fresh folder for every checkpoint", dir)
	}
	if err != nil {
		return fmt.Errorf("checkpoint image folder: %w", err)
	}
	return nil
}
