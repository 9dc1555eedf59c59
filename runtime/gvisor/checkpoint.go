package gvisor

import (
	"context"
	"errors"
	"fmt"

	"github.com/stasis-run/stasis/internal/fsutil"
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
	_, err := r.run(ctx, invocation{args: append(args, id)})
	return err
}

// Restore creates container id from a checkpoint image and runs it.
func (r *Runsc) Restore(ctx context.Context, id string, opts runtime.RestoreOptions) error {
	gpu, err := IsGPUBundle(opts.Bundle)
	if err != nil {
		return err
	}
	r.notifyGPU(gpu, opts.Notify)
	args := []string{"restore", "--image-path", opts.ImageDir, "--bundle", opts.Bundle, "--detach"}
	if opts.Background {
		if !r.features.Background {
			return fmt.Errorf("runsc at %s cannot restore in the background (no restore -background); restore eagerly instead", r.path)
		}
		args = append(args, "--background")
	}
	return r.startSandbox(ctx, id, opts.Bundle, invocation{args: append(args, id), gpu: gpu}, opts.ConsoleLog)
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
