package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// writebackInterval is how often the checkpoint has the kernel start
// writing what the runtime wrote of the image so far. Short, so the disk's
// queue never runs dry between passes: on the H200 machine an 8 GiB image
// was durable at 2.06 GB/s with 10 ms (the disk's O_DIRECT speed) against
// 1.68 GB/s with 100 ms and 1.53 GB/s with no writeback before the fsync
// (fsutil's BenchmarkWriteback, docs/benchmarks.md).
const writebackInterval = 10 * time.Millisecond

// imageDir is the snapshot subfolder that holds a Full snapshot's image.
const imageDir = "image"

// Suspend snapshots the actor into opts.Dir and stops its sandbox (or,
// with opts.Keep, keeps it frozen). On failure before the commit the actor
// keeps running as it was, its GPU state back on the GPU, opts.Dir holds no
// snapshot, and the error names the step and the cause. A committed
// snapshot is returned even when a later step failed.
func (e *Engine) Suspend(ctx context.Context, a Actor, opts SuspendOptions) (*snapshot.Manifest, error) {
	name := cmp.Or(opts.Name, "suspend")
	o := op{actor: a.Label(), name: name, obs: opts.Observer}
	switch opts.Scope {
	case snapshot.ScopeFull, "":
		return e.suspendFull(ctx, o, a, opts.Dir, opts.Keep, opts.Follower)
	case snapshot.ScopeData:
		return e.suspendData(ctx, o, a, opts.Dir)
	}
	return nil, fmt.Errorf("suspend %s: %w: unknown snapshot scope %q (want Full or Data)", a.Label(), ErrRefused, opts.Scope)
}

func (e *Engine) suspendFull(ctx context.Context, o op, a Actor, dir string, keep func() (bool, string), follower ImageFollower) (m *snapshot.Manifest, err error) {
	began := time.Now()
	var plan *Plan
	err = o.step(StepPreflight, func() (msg string, err error) {
		plan, msg, err = e.preflightFull(ctx, a, dir)
		return msg, err
	})
	if err != nil {
		return nil, err
	}
	// From here on the snapshot folder is ours: a failure empties it again
	// so that a retry can use it.
	defer func() {
		// A committed snapshot (m set) is whole and is kept even when a
		// later step fails.
		if err != nil && m == nil {
			_ = fsutil.RemoveContents(dir)
		}
	}()

	// What the sandbox read since its resume, taken before the GPU step,
	// whose driver code is the suspend's, not a request's.
	firstReads, readNote := e.readSinceResume(a)
	if readNote != "" {
		o.note(readNote)
	}
	cp := e.checkpointOptions(dir)
	h, holder := e.Runtime.(runtime.DeviceHolder)
	manifest := snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: a.Label(), Runtime: e.runtimeInfo(checkpointFlags(cp)), Node: &plan.Node, Guest: plan.Guest}
	if a.GPU {
		manifest.GPU = &snapshot.GPU{DriverVersion: plan.Node.GPU.DriverVersion, CUDADriverAPI: plan.Node.GPU.CUDADriverAPI, NvproxyABI: plan.Node.Runtime.GPUABI,
			Processes: plan.CUDAProcesses, Devices: plan.GPUs, Path: string(plan.GPUPath)}
		if plan.GPUPath == GPUPathRuntime {
			// The runtime checkpoints every CUDA process itself inside the
			// checkpoint step, and puts them back when that fails.
			cp.CUDACheckpointPath, cp.CUDACheckpointSequential = e.helperPath(), e.CUDASequential
		} else {
			err := o.step(StepGPUSuspend, func() (string, error) {
				rep, err := e.gpuSuspend(ctx, a.ID)
				manifest.GPU.CUDADriverAPI, manifest.GPU.Processes = rep.DriverVersion, len(rep.Outcomes)
				return summary(rep), err
			})
			if err != nil {
				return nil, e.undoSuspend(ctx, o, a, false, err)
			}
			if !holder {
				o.gpuFree(began, manifest.GPU)
			}
		}
	}
	if holder {
		// The devices hold no state now (it is in the sandbox's memory), and
		// a VM with a passed-through device cannot be checkpointed.
		err := o.step(StepDetachDevices, func() (string, error) { return "", h.DetachDevices(ctx, a.ID) })
		if err != nil {
			return nil, e.undoSuspend(ctx, o, a, true, err)
		}
		o.gpuFree(began, manifest.GPU)
	}
	manifest.OpenFiles = e.openFiles(ctx, o, a.ID)
	manifest.FirstReads = firstReads
	follower = e.follow(ctx, o, follower, cp, dir, plan.HostMemory)
	var checkpointTook time.Duration
	err = o.step(StepCheckpoint, func() (string, error) {
		// The disk starts on the image while the runtime writes it, so that
		// the commit's fsync after it finds most of it written.
		defer fsutil.StartWriteback(cp.ImageDir, writebackInterval)()
		defer func(began time.Time) { checkpointTook = time.Since(began) }(time.Now())
		msg := ""
		if cp.CUDACheckpointPath != "" {
			msg = fmt.Sprintf("the runtime checkpointed the CUDA processes with %s", cp.CUDACheckpointPath)
		}
		return msg, e.Runtime.Checkpoint(ctx, a.ID, cp)
	})
	if err != nil && follower != nil {
		follower.Stop()
	}
	if err == nil {
		err = o.step(StepCommit, func() (string, error) {
			known := e.followed(ctx, o, follower, checkpointTook)
			var err error
			m, err = snapshot.CommitHashed(ctx, dir, manifest, known)
			if err != nil {
				return "", err
			}
			if len(known) > 0 {
				return fmt.Sprintf("%d files synced and hashed, %d of them read as they were written", len(m.Files), len(known)), nil
			}
			return fmt.Sprintf("%d files synced and hashed", len(m.Files)), nil
		})
	}
	if err != nil {
		return nil, e.undoSuspend(ctx, o, a, holder, err)
	}
	if keep != nil && e.freeze(ctx, o, a.ID, a.GPU && plan.GPUPath == GPUPathRuntime, keep) {
		return m, nil
	}
	if err := e.stop(ctx, o, a.ID); err != nil {
		// The snapshot is whole, but the sandbox still runs with its GPU
		// state in host memory: bring that back rather than leave it frozen.
		err = fmt.Errorf("snapshot %s was committed, but %w; the actor keeps running", dir, err)
		return m, e.undoSuspend(ctx, o, a, holder, err)
	}
	if plan.GPUPath == GPUPathRuntime {
		o.gpuFree(began, manifest.GPU)
	}
	e.resumed.drop(a.ID)
	return m, nil
}

// follow starts follower on the image the checkpoint cp writes into dir,
// of at most image bytes, where the runtime writes it front to back, and
// returns it; nil where it does not follow (none given, the runtime's
// writes run in parallel, an image under followMin, or it could not
// start: noted).
func (e *Engine) follow(ctx context.Context, o op, follower ImageFollower, cp runtime.CheckpointOptions, dir string, image uint64) ImageFollower {
	if follower == nil || !e.Runtime.Capabilities().AppendImage || cp.Direct || image < followMin {
		return nil
	}
	if err := follower.Follow(ctx, dir, imageDir); err != nil {
		o.note("the image is read after the checkpoint, not while it is written: " + err.Error())
		return nil
	}
	return follower
}

// followed waits for follower (nil: none) to read the rest of the image
// and returns the blocks it hashed, for the commit. It waits as long as the
// checkpoint took, FollowWait at least: a store slow to take what the follower
// packs must not keep the actor's GPU state in host memory and its sandbox
// up much longer than the checkpoint did. A follower that fails or takes
// longer is noted and stopped, and the commit reads the files itself.
func (e *Engine) followed(ctx context.Context, o op, follower ImageFollower, checkpointTook time.Duration) map[string][]string {
	if follower == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, max(checkpointTook, e.followWait()))
	defer cancel()
	known, err := follower.Written(wctx)
	if err != nil {
		follower.Stop()
		o.note("the image is hashed and stored after the checkpoint, not while it was written: " + err.Error())
		return nil
	}
	return known
}

// followMin is the least image a follower reads while it is written: a
// smaller one is written in about a second, too soon for much to overlap,
// and its push is cheaper without a second lock on the store.
const followMin = 1 << 30

// gpuFree notes in the actor's history how long the operation held the GPU
// of a snapshot whose CUDA processes were checkpointed (gpu): from its
// start until the driver's checkpoint released the GPU (a micro-VM's
// passed-through device: until it was detached; on the runtime's GPU path:
// until the sandbox stopped). That is what the node's next GPU workload
// waits for, while the rest of a suspend (the runtime's checkpoint, the
// commit, the push) runs beside it.
func (o op) gpuFree(began time.Time, gpu *snapshot.GPU) {
	if gpu == nil || gpu.Processes == 0 {
		return
	}
	o.note(fmt.Sprintf("the GPU is free, %.2f s after the %s began", time.Since(began).Seconds(), o.name))
}

// freeze keeps the sandbox of a committed snapshot, frozen, when keep says
// so, and says whether it did; a sandbox that cannot be frozen is stopped
// like any other, and so is one that holds its GPU (the runtime put the GPU
// state back after its checkpoint).
func (e *Engine) freeze(ctx context.Context, o op, id string, holdsGPU bool, keep func() (bool, string)) bool {
	ok, why := false, "the runtime put its GPU state back after the checkpoint (GPU path runtime), so it would hold the GPU"
	if !holdsGPU {
		ok, why = keep()
	}
	if !ok {
		o.note("the sandbox is not kept in memory: " + why)
		return false
	}
	err := o.step(StepFreeze, func() (string, error) {
		return "the sandbox is kept frozen in memory, its GPU released: " + why, e.Runtime.Pause(ctx, id)
	})
	return err == nil
}

// stop kills the sandbox, which frees its memory and GPU, then deletes the
// container. They are two steps because the second can take a while: runsc
// delete waits until the host's init has reaped the dead sandbox. Once the
// sandbox is killed the delete runs whatever its Before says (a journal
// that cannot record it, its disk full): the kill cannot be taken back, a
// delete is safe to run again after a crash, and one left undone would
// fail the operation with its sandbox already gone.
func (e *Engine) stop(ctx context.Context, o op, id string) error {
	err := o.step(StepStop, func() (string, error) {
		err := e.Runtime.Stop(ctx, id)
		if errors.Is(err, runtime.ErrNotFound) {
			return "the sandbox was gone already", nil
		}
		return "sandbox gone, GPU and memory freed", err
	})
	if err != nil {
		return err
	}
	return o.undo(StepDelete, func() (string, error) { return "", e.Runtime.Delete(ctx, id) })
}

// undoSuspend puts back what a failed suspend took from the running
// sandbox, its devices (when detach ran) and then its GPU state, even when
// the caller's context is gone, and says in the error whether it could.
func (e *Engine) undoSuspend(ctx context.Context, o op, a Actor, detached bool, cause error) error {
	if !detached && !a.GPU {
		return cause
	}
	cctx, cancel := e.cleanupContext(ctx)
	defer cancel()
	if h, ok := e.Runtime.(runtime.DeviceHolder); ok && detached {
		err := o.undo(StepAttachDevices, func() (string, error) { return "", h.AttachDevices(cctx, a.ID) })
		if err != nil {
			return fmt.Errorf("%w; and its devices could not be attached again, the workload may be stuck without them: %w", cause, err)
		}
	}
	if !a.GPU {
		return fmt.Errorf("%w (devices attached again; the actor keeps running)", cause)
	}
	err := o.undo(StepGPUResume, func() (string, error) {
		rep, err := e.gpuResume(cctx, a.ID, nil)
		return summary(rep), err
	})
	if err != nil {
		return fmt.Errorf("%w; and the GPU state could not be resumed, the workload may be frozen: %w", cause, err)
	}
	return fmt.Errorf("%w (GPU state resumed; the actor keeps running)", cause)
}

// preflightFull refuses, before anything is touched, a suspend that cannot
// work (see Plan: the sandbox must be running, among the rest), and a
// snapshot folder that is in use.
func (e *Engine) preflightFull(ctx context.Context, a Actor, dir string) (*Plan, string, error) {
	p, err := e.Plan(ctx, a, dir)
	if err != nil {
		return nil, "", err
	}
	if err := p.Refused(); err != nil {
		return nil, "", err
	}
	if err := prepareDir(dir); err != nil {
		return nil, "", err
	}
	msg := fmt.Sprintf("sandbox memory %s, GPU memory %s, disk free %s", units.Bytes(p.SandboxMemory), units.Bytes(p.GPUMemory), units.Bytes(p.DiskFree))
	for _, w := range p.Warnings {
		msg += "; " + w
	}
	return p, msg, nil
}

// checkpointOptions is how a Full snapshot's image is written into dir:
// the sandbox always left running, with the image options this runtime
// takes.
func (e *Engine) checkpointOptions(dir string) runtime.CheckpointOptions {
	caps := e.Runtime.Capabilities()
	return runtime.CheckpointOptions{ImageDir: filepath.Join(dir, imageDir), LeaveRunning: true,
		Direct: e.DirectIO && caps.Direct, ExcludeZeroPages: !e.KeepZeroPages && caps.ExcludeZeroPages}
}

// checkpointFlags are cp's options beyond the basics, as the manifest
// records them.
func checkpointFlags(cp runtime.CheckpointOptions) []string {
	flags := []string{"--leave-running"}
	if cp.Direct {
		flags = append(flags, "--direct")
	}
	if cp.ExcludeZeroPages {
		flags = append(flags, "--exclude-committed-zero-pages")
	}
	return flags
}

func (e *Engine) runtimeInfo(checkpointFlags []string) snapshot.Runtime {
	rt := e.Runtime.Info()
	info := snapshot.Runtime{Name: rt.Name, Version: rt.Version, CheckpointFlags: checkpointFlags, ImageDir: imageDir}
	if f, ok := e.Runtime.(interface{ GlobalFlags() []string }); ok {
		info.Flags = f.GlobalFlags()
	}
	return info
}

// prepareDir makes dir, refusing one that already holds anything.
func prepareDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: no snapshot folder given", ErrRefused)
	}
	err := fsutil.MkdirEmpty(dir)
	if errors.Is(err, fsutil.ErrNotEmpty) {
		return fmt.Errorf("%w: snapshot folder %s is not empty (a snapshot folder is written once; pick a new one)", ErrRefused, dir)
	}
	if err != nil {
		return fmt.Errorf("snapshot folder: %w", err)
	}
	return nil
}

// durableSources maps each durable folder to the host folder behind it.
func durableSources(a Actor) (map[string]string, error) {
	spec, err := bundle.Load(a.Bundle)
	if err != nil {
		return nil, err
	}
	sources := map[string]string{}
	for _, d := range a.DurableDirs {
		src, err := bundle.DurableSource(spec, d)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		sources[d] = src
	}
	return sources, nil
}
