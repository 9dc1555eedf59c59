package engine

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// BootOptions tune Boot.
type BootOptions struct {
	Probe    Probe
	Observer Observer
}

// Boot creates and starts the actor's sandbox from its bundle and waits
// for its readiness probe. On failure the sandbox is removed again.
func (e *Engine) Boot(ctx context.Context, a Actor, opts BootOptions) (err error) {
	o := op{actor: a.Label(), name: "boot", obs: opts.Observer}
	id := a.ID
	defer func() {
		if err != nil {
			cctx, cancel := e.cleanupContext(ctx)
			defer cancel()
			_ = o.undo(StepCleanup, func() (string, error) {
				return "the sandbox that did not start was removed", e.Runtime.Delete(cctx, id)
			})
		}
	}()
	if err := o.step(StepBoot, func() (string, error) { return e.create(ctx, a, id, o) }); err != nil {
		return err
	}
	return e.waitReady(ctx, o, id, opts.Probe, a.ConsoleLog)
}

// create creates and starts sandbox id from the actor's bundle.
func (e *Engine) create(ctx context.Context, a Actor, id string, o op) (string, error) {
	if err := e.Runtime.Create(ctx, id, a.Bundle, runtime.CreateOptions{ConsoleLog: a.ConsoleLog, Notify: o.note}); err != nil {
		return "", err
	}
	return "sandbox started", e.Runtime.Start(ctx, id)
}

// WaitReady runs the readiness probe, if any, against a running sandbox.
func (e *Engine) WaitReady(ctx context.Context, a Actor, id string, p Probe, obs Observer) error {
	return e.waitReady(ctx, op{actor: a.Label(), name: "probe", obs: obs}, id, p, a.ConsoleLog)
}

// Remove stops sandbox id, which frees its memory and GPUs, and deletes the
// container; a sandbox that is gone, or half deleted by a runtime that was
// killed, is removed as well.
func (e *Engine) Remove(ctx context.Context, actor, id string, obs Observer) error {
	return e.stop(ctx, op{actor: actor, name: "remove", obs: obs}, id)
}

// Status is where sandbox id stands; one the runtime does not know is
// stopped.
func (e *Engine) Status(ctx context.Context, id string) (runtime.Status, error) {
	st, err := e.Runtime.State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return runtime.StatusStopped, nil
	}
	return st.Status, err
}

// Fence freezes sandbox id where it stands (the runtime's pause), saving
// nothing: nothing in it runs until Unfence. One frozen already is fenced.
func (e *Engine) Fence(ctx context.Context, actor, id string, obs Observer) error {
	return op{actor: actor, name: "fence", obs: obs}.step(StepFreeze, func() (string, error) {
		st, err := e.Runtime.State(ctx, id)
		if err != nil {
			return "", err
		}
		switch st.Status {
		case runtime.StatusPaused:
			return "the sandbox was frozen already", nil
		case runtime.StatusRunning:
			if err := e.Runtime.Pause(ctx, id); err != nil {
				// Frozen meanwhile by another hand (the fence watchdog,
				// the fleet agent): fenced all the same.
				if st, serr := e.Runtime.State(ctx, id); serr == nil && st.Status == runtime.StatusPaused {
					return "the sandbox was frozen meanwhile, by another", nil
				}
				return "", err
			}
			return "the sandbox is frozen", nil
		}
		return "", fmt.Errorf("sandbox %s is %s: nothing runs there to fence", id, st.Status)
	})
}

// Unfence lets a sandbox that Fence froze run again. One that runs is
// unfenced.
func (e *Engine) Unfence(ctx context.Context, actor, id string, obs Observer) error {
	return op{actor: actor, name: "unfence", obs: obs}.step(StepUnpause, func() (string, error) {
		st, err := e.Runtime.State(ctx, id)
		if err != nil {
			return "", err
		}
		switch st.Status {
		case runtime.StatusRunning:
			return "the sandbox ran already", nil
		case runtime.StatusPaused:
			return "the sandbox runs again", e.Runtime.Unpause(ctx, id)
		}
		return "", fmt.Errorf("sandbox %s is %s: nothing there to thaw", id, st.Status)
	})
}

// PauseCommand is the command line that pauses sandbox id without this
// process, where the runtime has one (runtime.PauseCommander); nil
// otherwise.
func (e *Engine) PauseCommand(id string) []string {
	if pc, ok := e.Runtime.(runtime.PauseCommander); ok {
		return pc.PauseCommand(id)
	}
	return nil
}

// Exec runs a command inside a running sandbox and waits for it; a
// non-zero exit is in the result, not an error.
func (e *Engine) Exec(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	res, err := e.Runtime.Exec(ctx, id, p)
	// A runtime that could not stream (a micro-VM's agent answers
	// whole): what it gave is written to the streams at the end.
	for _, out := range []struct {
		w    io.Writer
		data *[]byte
	}{{p.Stdout, &res.Stdout}, {p.Stderr, &res.Stderr}} {
		if out.w != nil && len(*out.data) > 0 {
			if _, werr := out.w.Write(*out.data); werr != nil && err == nil {
				err = werr
			}
			*out.data = nil
		}
	}
	return res, err
}

// ErrCannotWait marks a runtime that cannot say when a sandbox's process
// ends (runtime.Waiter).
var ErrCannotWait = errors.New("this runtime does not say when a sandbox's process ends")

// Wait blocks until sandbox id's process ends, or ctx does, and says how
// it ended.
func (e *Engine) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	w, ok := e.Runtime.(runtime.Waiter)
	if !ok {
		return runtime.Exit{}, ErrCannotWait
	}
	return w.Wait(ctx, id)
}

// Thaw makes sure a sandbox that an interrupted operation may have left
// frozen runs: a paused sandbox (a Data snapshot pauses it) is unpaused,
// the devices a runtime detached are attached, and for a GPU actor every
// CUDA process that is locked or checkpointed is resumed (a no-op when none
// is). A journal that finds an operation cut short calls it so that no
// workload stays frozen.
func (e *Engine) Thaw(ctx context.Context, a Actor, id string, obs Observer) error {
	st, err := e.Runtime.State(ctx, id)
	if err != nil {
		return err
	}
	return e.thaw(ctx, op{actor: a.Label(), name: "thaw", obs: obs}, a, id, st, nil)
}

// thaw is Thaw within operation o of the sandbox whose state the caller
// observed (st), the GPU state put back by devices when it is not empty.
func (e *Engine) thaw(ctx context.Context, o op, a Actor, id string, st runtime.State, devices gpu.DeviceMap) error {
	if st.Status == runtime.StatusPaused {
		if err := o.step(StepUnpause, func() (string, error) { return "", e.Runtime.Unpause(ctx, id) }); err != nil {
			return err
		}
	} else if st.Status != runtime.StatusRunning {
		return fmt.Errorf("sandbox %s is %s: nothing runs there to thaw", id, st.Status)
	}
	if h, ok := e.Runtime.(runtime.DeviceHolder); ok {
		if err := o.step(StepAttachDevices, func() (string, error) { return "", h.AttachDevices(ctx, id) }); err != nil {
			return err
		}
	}
	if !a.GPU {
		return nil
	}
	return o.step(StepGPUResume, func() (string, error) {
		rep, err := e.gpuResume(ctx, id, devices)
		return summary(rep), err
	})
}

// ErrNotKept is ResumeKept's answer when the sandbox it was asked to bring
// back is not there, frozen: the caller resumes from the snapshot instead.
var ErrNotKept = errors.New("no kept sandbox")

// ResumeKept brings back an actor whose sandbox a suspend kept frozen
// (SuspendOptions.Keep), with nothing to load: its memory never left. The
// snapshot in dir, which holds the same state, is first checked against
// this node as for a restore of it, and a refusal touches nothing. Then
// the sandbox is thawed (unpaused, its devices attached, its GPU state
// resumed) and probed. On a failure after the check the kept sandbox is
// removed, so that nothing half resumed runs, and the error wraps
// ErrNotKept: the snapshot in dir is as it was, for Resume. A sandbox
// that is not there frozen is an ErrNotKept too.
func (e *Engine) ResumeKept(ctx context.Context, a Actor, dir string, opts ResumeOptions) (err error) {
	o := op{actor: a.Label(), name: "resume", obs: opts.Observer}
	id := a.ID
	st, err := e.Runtime.State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("%w: sandbox %s is gone", ErrNotKept, id)
	}
	if err != nil {
		return err
	}
	if st.Status != runtime.StatusPaused {
		return fmt.Errorf("%w: sandbox %s is %s", ErrNotKept, id, st.Status)
	}
	err = o.step(StepCompatibility, func() (string, error) {
		const msg = "its sandbox was kept in memory: nothing to load"
		m, err := snapshot.Load(dir)
		if err != nil {
			// The sandbox holds the state; only the check is lost.
			return fmt.Sprintf("%s; not checked against this node, the snapshot's manifest cannot be read (%v)", msg, err), nil
		}
		checked, devices, err := e.compatibility(ctx, a, m, opts.DeviceMap)
		if err != nil {
			return "", err
		}
		opts.DeviceMap = devices
		return checked + "; " + msg, nil
	})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cctx, cancel := e.cleanupContext(ctx)
			defer cancel()
			_ = o.undo(StepCleanup, func() (string, error) {
				return "the kept sandbox was removed; the snapshot is as it was", e.Runtime.Delete(cctx, id)
			})
			err = fmt.Errorf("%w: %w", ErrNotKept, err)
		}
	}()
	if err := e.thaw(ctx, o, a, id, st, opts.DeviceMap); err != nil {
		return err
	}
	return e.waitReady(ctx, o, id, opts.Probe, a.ConsoleLog)
}
