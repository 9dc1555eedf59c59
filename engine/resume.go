package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Resume brings the actor back from the snapshot in dir, in a new sandbox
// of the actor's ID, and returns the snapshot's manifest.
// Before any sandbox exists the snapshot is checked (see Verification, and
// ResumeOptions.Checked) and compared with this node; a corrupt or
// incompatible one is refused with the reason. On failure the new sandbox
// is removed and the snapshot is left as it was.
func (e *Engine) Resume(ctx context.Context, a Actor, dir string, opts ResumeOptions) (m *snapshot.Manifest, err error) {
	o := op{actor: a.Label(), name: "resume", obs: opts.Observer}
	id := a.ID
	if _, vm := e.Runtime.(runtime.GuestReporter); vm && opts.Verify == VerifyWhileRestoring {
		// A VM's restore loads the whole migration stream and runs the
		// guest at once: nothing is won by hashing alongside, and a guest
		// must not run on memory that is not the snapshot's.
		opts.Verify = VerifyBlocks
	}
	err = o.step(StepVerify, func() (string, error) {
		if opts.Checked != nil {
			if err := snapshot.CheckFiles(ctx, dir, opts.Checked); err != nil {
				return "", refusal(err)
			}
			m = opts.Checked
			return fmt.Sprintf("%s snapshot, %d files (%s), sizes checked against the manifest checked before", m.Scope, len(m.Files), units.Bytes(m.Size())), nil
		}
		var err error
		if m, err = snapshot.Check(ctx, dir); err != nil {
			return "", refusal(err)
		}
		how := "sizes checked"
		switch opts.Verify {
		case VerifyBlocks:
			if err := snapshot.VerifyContents(ctx, dir, m); err != nil {
				return "", refusal(err)
			}
			how = "every block hashed"
		case VerifyWhileRestoring:
			how = "sizes checked; every block is hashed while it restores"
		}
		return fmt.Sprintf("%s snapshot, %d files (%s), %s", m.Scope, len(m.Files), units.Bytes(m.Size()), how), nil
	})
	if err != nil {
		return nil, err
	}
	if opts.Checked == nil {
		if opts.DeviceMap, err = e.CheckRestore(ctx, a, m, opts); err != nil {
			return nil, err
		}
	}
	// The hashing runs beside the restore, or, for a GPU actor, beside the
	// GPU step, which is the long one (on the H200, hashing beside runsc's
	// restore slowed the restore more than the hashing took); a mismatch
	// cuts what runs short (its context is cancelled with the cause) and
	// fails the resume.
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var hashed chan error
	startHash := func() {
		if hashed != nil || opts.Checked != nil || opts.Verify != VerifyWhileRestoring {
			return
		}
		hashed = make(chan error, 1)
		// The manifest as verified, not the result variable, which a
		// failing return sets to nil while this runs.
		manifest := m
		go func() {
			err := snapshot.VerifyContents(rctx, dir, manifest)
			if err != nil {
				stop(err)
			}
			hashed <- err
		}()
	}
	if m.Scope != snapshot.ScopeFull || !a.GPU {
		startHash()
	}
	defer func() {
		if err != nil {
			if hashed != nil {
				stop(err)
				<-hashed
			}
			cctx, cancel := e.cleanupContext(ctx)
			defer cancel()
			_ = o.undo(StepCleanup, func() (string, error) {
				return "the new sandbox was removed; the snapshot is as it was", e.Runtime.Delete(cctx, id)
			})
		}
	}()
	held := func() bool { return false }
	if m.Scope == snapshot.ScopeData {
		err = e.resumeData(rctx, o, a, id, dir, m)
	} else {
		// The page map of the held files, for the next suspend's first
		// reads, is taken once the restore has opened them, beside the GPU
		// step rather than after it: it takes tens of milliseconds.
		err = e.resumeFull(rctx, o, a, id, dir, m, opts, func() {
			startHash()
			held = e.mapHeld(a, m)
		})
	}
	// What the sandbox read first after an earlier resume is read while
	// the rest of the image arrives and the blocks are checked.
	readFirst := func() string { return "" }
	if err == nil && m.Scope == snapshot.ScopeFull {
		readFirst = e.readFirst(rctx, a, m)
	}
	if err == nil && opts.Arriving != nil {
		err = o.step(StepArrived, func() (string, error) { return opts.Arriving(rctx) })
	}
	// The sandbox is not reported ready, nor probed, before its snapshot
	// is proven whole; a restore cut short by a mismatch reports it.
	if hashed != nil && (err == nil || context.Cause(rctx) != nil) {
		herr := o.step(StepVerifyBlocks, func() (string, error) {
			if err := <-hashed; err != nil {
				return "", errdefs.Mark(fmt.Errorf("%w: %w", ErrRefused, err), errdefs.ErrCorrupt)
			}
			return "every block matches its SHA-256", nil
		})
		hashed = nil
		if herr != nil {
			readFirst()
			return nil, herr
		}
	}
	if msg := readFirst(); msg != "" && err == nil {
		o.note(msg)
	}
	if err != nil {
		return nil, err
	}
	if err := e.waitReady(ctx, o, id, opts.Probe, a.ConsoleLog); err != nil {
		return nil, err
	}
	if !held() {
		e.resumed.drop(a.ID)
	}
	return m, nil
}

// refusal is ErrRefused for cause, in cause's own category when it has one:
// a snapshot refused as corrupt is data_loss, not a failed precondition.
func refusal(cause error) error {
	err := fmt.Errorf("%w: %w", ErrRefused, cause)
	if c := errdefs.Of(cause); c.Code != errdefs.Internal.Code {
		return errdefs.Mark(err, c.Err)
	}
	return err
}

// CheckRestore is a restore's compatibility step, reported to
// opts.Observer: the snapshot whose manifest is m against this node, and
// the new sandbox's container id (the actor's ID) free. It
// returns the device map the GPU state is to move by: opts.DeviceMap when
// given, else the one the check chose. A pull runs it before any byte
// moves, then resumes with ResumeOptions.Checked and that device map.
func (e *Engine) CheckRestore(ctx context.Context, a Actor, m *snapshot.Manifest, opts ResumeOptions) (gpu.DeviceMap, error) {
	id := a.ID
	var devices gpu.DeviceMap
	err := opts.Observer.Step(a.Label(), "resume", StepCompatibility, func() (msg string, err error) {
		if msg, devices, err = e.compatibility(ctx, a, m, opts.DeviceMap); err != nil {
			return "", err
		}
		return msg, e.idFree(ctx, id)
	})
	return devices, err
}

// compatibility checks m against this node and says so; it returns the
// device map to use: given, when the caller gave one, else the one it
// chose.
func (e *Engine) compatibility(ctx context.Context, a Actor, m *snapshot.Manifest, given gpu.DeviceMap) (string, gpu.DeviceMap, error) {
	res, err := e.Compatible(ctx, a, m)
	if err != nil {
		return "", nil, err
	}
	devices := given
	if len(devices) == 0 {
		devices = res.DeviceMap
	}
	msg := "this node can restore it"
	if len(res.DeviceMap) > 0 {
		msg += "; GPU state moves by device map " + res.DeviceMap.String()
	}
	for _, w := range res.Warnings {
		msg += "; " + w
	}
	return msg, devices, nil
}

func (e *Engine) waitReady(ctx context.Context, o op, id string, p Probe, console string) error {
	if p.Command == nil && p.URL == "" {
		return nil
	}
	return o.step(StepProbe, func() (string, error) { return e.probe(ctx, id, p, console) })
}

// resumeFull restores the image and puts the GPU state back; afterRestore
// runs between the two.
func (e *Engine) resumeFull(ctx context.Context, o op, a Actor, id, dir string, m *snapshot.Manifest, opts ResumeOptions, afterRestore func()) error {
	byRuntime := a.GPU && m.GPU != nil && m.GPU.Path == snapshot.GPUPathRuntime
	image := filepath.Join(dir, imageDir)
	background, load := true, "memory loads in the background, as the pull brings it"
	if opts.Arriving == nil {
		background, load = e.loadInBackground(image, a.GPU)
	}
	ro := runtime.RestoreOptions{
		ImageDir: image, Bundle: a.Bundle, Background: background,
		ConsoleLog: a.ConsoleLog, Notify: o.note, Direct: e.DirectIO && e.Runtime.Capabilities().Direct,
	}
	if byRuntime && len(opts.DeviceMap) > 0 {
		// The runtime passes no device map to the helper it runs after
		// the restore; the helper takes it from its environment.
		ro.Env = []string{helper.DeviceMapEnv + "=" + opts.DeviceMap.String()}
	}
	if !opts.Prefetched {
		if msg := e.Prefetch(ctx, a, m); msg != "" {
			o.note(msg)
		}
	}
	err := o.step(StepRestore, func() (string, error) { return load, e.Runtime.Restore(ctx, id, ro) })
	if err != nil {
		return err
	}
	afterRestore()
	if h, ok := e.Runtime.(runtime.DeviceHolder); ok {
		if err := o.step(StepAttachDevices, func() (string, error) { return "", h.AttachDevices(ctx, id) }); err != nil {
			return err
		}
	}
	if !a.GPU {
		return nil
	}
	if byRuntime {
		return o.step(StepGPUResume, func() (string, error) { return e.awaitRuntimeGPU(ctx, id, opts.DeviceMap) })
	}
	return o.step(StepGPUResume, func() (string, error) {
		rep, err := e.gpuResume(ctx, id, opts.DeviceMap)
		return summary(rep), err
	})
}

// gpuPollInterval is how often the engine looks at the CUDA processes while
// the runtime puts them back.
const gpuPollInterval = 100 * time.Millisecond

// awaitRuntimeGPU waits while the runtime puts the CUDA processes of a
// restored sandbox back on the GPU itself (runsc does it after its restore
// returns, and kills the sandbox if it fails), until every one runs.
func (e *Engine) awaitRuntimeGPU(ctx context.Context, id string, devices gpu.DeviceMap) (string, error) {
	tick := time.NewTicker(gpuPollInterval)
	defer tick.Stop()
	var last error
	for polls := 1; ; polls++ {
		rep, err := e.runHelper(ctx, id, helper.Status, 0, "")
		if err == nil {
			waiting := 0
			for _, p := range rep.Processes {
				switch p.State {
				case "failed":
					return "", fmt.Errorf("the runtime's CUDA restore left pid %d failed", p.PID)
				case "locked", "checkpointed":
					waiting++
				}
			}
			if waiting == 0 {
				msg := fmt.Sprintf("the runtime put %d CUDA process(es) back (%d look(s))", len(rep.Processes), polls)
				if len(devices) > 0 {
					msg += "; device map " + devices.String()
				}
				return msg, nil
			}
			last = fmt.Errorf("%d of %d CUDA process(es) not running yet", waiting, len(rep.Processes))
		} else {
			last = err
			if st, serr := e.Runtime.State(ctx, id); serr == nil && st.Status != runtime.StatusRunning || errors.Is(serr, runtime.ErrNotFound) {
				return "", fmt.Errorf("the sandbox stopped while the runtime put its CUDA processes back (the runtime's log says why): %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for the runtime's CUDA restore: %w (last: %v)", ctx.Err(), last)
		case <-tick.C:
		}
	}
}

func (e *Engine) resumeData(ctx context.Context, o op, a Actor, id, dir string, m *snapshot.Manifest) error {
	if err := o.step(StepRestoreData, func() (string, error) { return "", restoreDurable(ctx, a, dir, m) }); err != nil {
		return err
	}
	return o.step(StepBoot, func() (string, error) { return e.create(ctx, a, id, o) })
}

// Compatible refuses a snapshot this node cannot restore, with every
// reason; Resume runs it before any sandbox exists (and before a pull
// fetches any byte).
func (e *Engine) Compatible(ctx context.Context, a Actor, m *snapshot.Manifest) (compat.Result, error) {
	if m.Scope == snapshot.ScopeFull && m.GPU != nil && !a.GPU {
		return compat.Result{}, fmt.Errorf("%w: the snapshot holds GPU state, and the actor is not a GPU actor here", ErrRefused)
	}
	if m.GPU != nil && m.GPU.Path == snapshot.GPUPathRuntime && !e.Runtime.Capabilities().CUDACheckpoint {
		return compat.Result{}, fmt.Errorf("%w: the snapshot's GPU state is put back by the runtime's own CUDA step (runsc --cuda-checkpoint-path), which %s %s does not have", ErrRefused, e.Runtime.Info().Name, e.Runtime.Info().Version)
	}
	n, err := e.Fingerprint(ctx)
	if err != nil {
		return compat.Result{}, err
	}
	res := compat.Check(m, n, e.Policy)
	if !res.Compatible {
		return res, fmt.Errorf("%w: this node cannot restore the snapshot: %s", ErrRefused, strings.Join(res.Reasons, "; "))
	}
	return res, nil
}

// idFree refuses to restore over a live container; a stopped leftover of an
// earlier run is deleted.
func (e *Engine) idFree(ctx context.Context, id string) error {
	if c, ok := e.Runtime.(runtime.IDChecker); ok {
		if err := c.CheckNewID(id); err != nil {
			return fmt.Errorf("%w: %w", ErrRefused, err)
		}
	}
	st, err := e.Runtime.State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Status != runtime.StatusStopped {
		return fmt.Errorf("%w: a container named %s already exists and is %s; suspend or delete it, or resume under another id", ErrRefused, id, st.Status)
	}
	return e.Runtime.Delete(ctx, id)
}

// probeInterval is how often a readiness probe is retried; every
// probeStateEvery-th failed attempt looks whether the sandbox still runs.
const (
	probeInterval   = 100 * time.Millisecond
	probeStateEvery = 5
)

// probe waits until sandbox id is ready. It gives up at the probe's
// timeout, or at once when the sandbox's process exited (nothing will ever
// answer), and then quotes the last lines of the sandbox's console, where
// the cause usually is.
func (e *Engine) probe(ctx context.Context, id string, p Probe, console string) (string, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(probeInterval)
	defer tick.Stop()
	var last error
	for attempt := 1; ; attempt++ {
		if last = e.probeOnce(ctx, id, p); last == nil {
			return fmt.Sprintf("ready after %d attempt(s)", attempt), nil
		}
		if attempt%probeStateEvery == 1 {
			if st, err := e.Status(ctx, id); err == nil && st == runtime.StatusStopped {
				return "", fmt.Errorf("the sandbox's process exited before it was ready (the probe: %v)%s", last, consoleTail(console))
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("not ready within %s, its process still running: %w%s", timeout, last, consoleTail(console))
		case <-tick.C:
		}
	}
}

// consoleLines is how much of the console a failed probe quotes.
const (
	consoleLines = 10
	consoleBytes = 4 << 10
)

// consoleTail is the last lines of the console log at path, as the end of
// an error: where to look, and what it says.
func consoleTail(path string) string {
	if path == "" {
		return ""
	}
	lines, err := fsutil.LastLines(path, consoleLines, consoleBytes)
	if err != nil {
		return ""
	}
	if len(lines) == 0 {
		return "; its console (" + path + ") is empty"
	}
	return "; the last lines of its console (" + path + "):\n  " + strings.Join(lines, "\n  ")
}

func (e *Engine) probeOnce(ctx context.Context, id string, p Probe) error {
	if p.URL != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("GET %s: %s", p.URL, resp.Status)
		}
		return nil
	}
	res, err := e.Runtime.Exec(ctx, id, runtime.Process{Args: p.Command})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s exited %d: %s", strings.Join(p.Command, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// loadInBackground decides how the restore of image loads its memory
// (Engine.MemoryLoad) and says why.
func (e *Engine) loadInBackground(image string, gpu bool) (bool, string) {
	switch e.MemoryLoad {
	case MemoryLoadEager:
		return false, "memory loaded before the sandbox runs"
	case MemoryLoadBackground:
		return true, "memory loads in the background"
	}
	if !gpu {
		// Nothing reads all of it at once; the sandbox runs sooner.
		return true, "memory loads in the background: no GPU state to restore"
	}
	huge, err := node.ReadHugePages(e.hugePagesDir())
	if err != nil || !huge.Sandbox {
		return true, "memory loads in the background: sandbox memory is in 4 KiB pages"
	}
	resident, total, err := fsutil.Resident(image)
	if err != nil {
		return true, fmt.Sprintf("memory loads in the background: page cache not read (%v)", err)
	}
	share := 1.0
	if total > 0 {
		share = float64(resident) / float64(total)
	}
	if share < EagerResidentShare {
		return true, fmt.Sprintf("memory loads in the background: %.0f%% of the image is in the page cache", 100*share)
	}
	return false, fmt.Sprintf("memory loaded before the sandbox runs: %.0f%% of the image is in the page cache and sandbox memory is in huge pages", 100*share)
}

func (e *Engine) hugePagesDir() string {
	if e.HugePagesDir != "" {
		return e.HugePagesDir
	}
	return node.HugePagesDir
}
