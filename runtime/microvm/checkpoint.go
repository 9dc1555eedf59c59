package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// Files of a VM's checkpoint image.
const (
	imageState  = "vm.state"   // QEMU's migration stream
	imageConfig = "vm.json"    // imageDescription
	imageKernel = "vmlinuz"    // the guest kernel the VM booted
	imageInitrd = "initrd.img" // and its initramfs
)

// imageDescription is what a restore needs besides the migration stream:
// the same machine, started with the same devices the VM held.
type imageDescription struct {
	QEMU    string   `json:"qemu"`
	Accel   string   `json:"accel"`
	Spec    Spec     `json:"spec"`
	Devices []Device `json:"devices,omitempty"`
}

// maxBandwidth lifts QEMU's migration speed limit (128 MiB/s by default,
// meant for live migration over a network); a paused VM written to a local
// file should go as fast as the disk.
const maxBandwidth = 1 << 40

// Checkpoint pauses the VM and writes its migration stream, with the kernel
// and initramfs it booted, into opts.ImageDir. With LeaveRunning a VM that
// was running runs again afterwards, also when the checkpoint fails; else
// QEMU is stopped once the image is written.
func (r *Runtime) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	return r.talk(ctx, id, true, func(ctx context.Context) error { return r.checkpoint(ctx, id, opts) })
}

func (r *Runtime) checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) (err error) {
	st, q, err := r.session(ctx, id)
	if err != nil {
		return err
	}
	defer q.close()
	if opts.ImageDir == "" {
		return fmt.Errorf("VM %s: checkpoint: no image folder given", id)
	}
	if err := fsutil.MkdirEmpty(opts.ImageDir); err != nil {
		return fmt.Errorf("VM %s: checkpoint: image folder %s: %w", id, opts.ImageDir, err)
	}
	var status struct {
		Status string `json:"status"`
	}
	if err := q.execute(ctx, "query-status", nil, &status); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	wasRunning := status.Status == "running"
	if err := q.migrationEvents(ctx); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if err := q.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": maxBandwidth}, nil); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if wasRunning {
		if err := q.execute(ctx, "stop", nil, nil); err != nil {
			return fmt.Errorf("VM %s: %w", id, err)
		}
		defer func() {
			if err != nil || opts.LeaveRunning {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeviceTimeout)
				defer cancel()
				if cerr := q.execute(cctx, "cont", nil, nil); cerr != nil {
					err = errors.Join(err, fmt.Errorf("VM %s: run it again: %w", id, cerr))
				}
			}
		}()
	}
	if err := r.writeImage(ctx, q, st, opts.ImageDir); err != nil {
		return fmt.Errorf("VM %s: checkpoint: %w", id, err)
	}
	if !opts.LeaveRunning {
		return kill(ctx, st.PID, st.Start)
	}
	return nil
}

func (r *Runtime) writeImage(ctx context.Context, q *qmp, st *vmState, dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, imageState), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := q.executeWithFile(ctx, "getfd", map[string]any{"fdname": "stasis-image"}, nil, f); err != nil {
		return err
	}
	if err := q.execute(ctx, "migrate", map[string]any{"uri": "fd:stasis-image"}, nil); err != nil {
		return err
	}
	if err := q.waitMigration(ctx); err != nil {
		if ctx.Err() != nil {
			_ = q.execute(context.WithoutCancel(ctx), "migrate_cancel", nil, nil)
		}
		// QEMU does not always say why a migration to a file failed (its
		// error-desc was empty on a full disk): the disk says.
		var fsst unix.Statfs_t
		if unix.Fstatfs(int(f.Fd()), &fsst) == nil && fsst.Bavail*uint64(fsst.Bsize) < 1<<20 {
			err = fmt.Errorf("%w (the disk of %s is full: %w)", err, dir, unix.ENOSPC)
		}
		return err
	}
	present, err := peripherals(ctx, q)
	if err != nil {
		return err
	}
	desc := imageDescription{QEMU: r.version, Accel: r.accelerator(), Spec: st.Spec}
	desc.Spec.Kernel, desc.Spec.Initrd = imageKernel, imageInitrd
	desc.Spec.Devices = nil
	for _, d := range st.Spec.Devices {
		if slices.Contains(present, d.ID) {
			desc.Devices = append(desc.Devices, d)
		}
	}
	data, err := json.MarshalIndent(desc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, imageConfig), data, 0o600); err != nil {
		return err
	}
	if err := fsutil.CopyFile(st.Spec.Kernel, filepath.Join(dir, imageKernel), 0o600); err != nil {
		return fmt.Errorf("keep the guest kernel: %w", err)
	}
	if err := fsutil.CopyFile(st.Spec.Initrd, filepath.Join(dir, imageInitrd), 0o600); err != nil {
		return fmt.Errorf("keep the guest initramfs: %w", err)
	}
	return nil
}

// readImage reads and checks an image's description.
func (r *Runtime) readImage(dir string) (imageDescription, error) {
	var desc imageDescription
	data, err := os.ReadFile(filepath.Join(dir, imageConfig))
	if err != nil {
		return desc, fmt.Errorf("VM image %s: %w", dir, err)
	}
	if err := json.Unmarshal(data, &desc); err != nil {
		return desc, fmt.Errorf("VM image %s: %s: %w", dir, imageConfig, err)
	}
	if desc.QEMU != r.version {
		return desc, fmt.Errorf("VM image %s was written by %q; this node runs %q, and QEMU restores only its own migration format", dir, desc.QEMU, r.version)
	}
	for _, name := range []string{desc.Spec.Kernel, desc.Spec.Initrd} {
		if name != filepath.Base(name) || strings.HasPrefix(name, ".") {
			return desc, fmt.Errorf("VM image %s: file name %q leaves the image folder", dir, name)
		}
	}
	desc.Spec.Kernel = filepath.Join(dir, desc.Spec.Kernel)
	desc.Spec.Initrd = filepath.Join(dir, desc.Spec.Initrd)
	return desc, nil
}

// Restore starts a new QEMU that reads the image's migration stream, runs
// the VM and waits for its agent. The VM comes back with the devices it
// held at the checkpoint; AttachDevices then adds the bundle's others. The
// whole image is read before the VM runs (opts.Background is not
// supported). On failure the new VM is removed.
func (r *Runtime) Restore(ctx context.Context, id string, opts runtime.RestoreOptions) (err error) {
	desc, err := r.readImage(opts.ImageDir)
	if err != nil {
		return err
	}
	bundleSpec, err := LoadSpec(opts.Bundle)
	if err != nil {
		return err
	}
	stream, err := os.Open(filepath.Join(opts.ImageDir, imageState))
	if err != nil {
		return fmt.Errorf("VM image %s: %w", opts.ImageDir, err)
	}
	defer stream.Close()
	// The machine is the image's; the devices to attach and the workload
	// are this node's bundle's.
	spec := desc.Spec
	spec.Devices, spec.Process = bundleSpec.Devices, bundleSpec.Process
	if err := r.boot(ctx, id, opts.Bundle, launch{spec: spec, consoleLog: opts.ConsoleLog, devices: desc.Devices, incoming: true}); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DeviceTimeout)
			defer cancel()
			_ = r.Delete(cctx, id)
		}
	}()
	q, err := dialQMP(ctx, r.files(id).qmp())
	if err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	defer q.close()
	if err := q.migrationEvents(ctx); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if err := q.executeWithFile(ctx, "getfd", map[string]any{"fdname": "stasis-image"}, nil, stream); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if err := q.execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:stasis-image"}, nil); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if err := q.waitMigration(ctx); err != nil {
		return fmt.Errorf("VM %s: the image %s does not load (corrupt, or written by a VM of another configuration): %w", id, opts.ImageDir, err)
	}
	if err := q.execute(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	if _, err := r.call(ctx, id, agent.Request{Op: agent.OpPing}); err != nil {
		return fmt.Errorf("VM %s: after the restore: %w", id, err)
	}
	return nil
}
