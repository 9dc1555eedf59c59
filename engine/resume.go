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
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Resume brings the actor back from the snapshot in dir, in a new sandbox
// (opts.ID, or the actor's own id). The snapshot is verified (every block's
// hash, or with VerifySizes its files and sizes) and checked against this
// node before any sandbox is created. On failure the new sandbox is removed and the snapshot is left
// as it was.
func (e *Engine) Resume(ctx context.Context, a Actor, dir string, opts ResumeOptions) (err error) {
	o := op{e: e, actor: a.ID, name: "resume"}
	id := opts.ID
	if id == "" {
		id = a.ID
	}
	var m *snapshot.Manifest
	err = o.step("verify", func() (string, error) {
		verify, how := snapshot.Verify, "every block hashed"
		if opts.Verify == VerifySizes {
			verify, how = snapshot.Check, "sizes checked"
		}
		var err error
		if m, err = verify(dir); err != nil {
			return "", fmt.Errorf("%w: %w", ErrRefused, err)
		}
		return fmt.Sprintf("%s snapshot, %d files, %s", m.Scope, len(m.Files), how), nil
	})
	if err != nil {
		return err
	}
	err = o.step("compatibility", func() (string, error) {
		res, err := e.Compatible(ctx, a, m)
		if err != nil {
			return "", err
		}
		if len(opts.DeviceMap) == 0 {
			opts.DeviceMap = res.DeviceMap
		}
		msg := "this node can restore it"
		if len(res.DeviceMap) > 0 {
			msg += "; GPU state moves by device map " + res.DeviceMap.String()
		}
		for _, w := range res.Warnings {
			msg += "; " + w
		}
		return msg, e.idFree(ctx, id)
	})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cctx, cancel := e.cleanupContext(ctx)
			defer cancel()
			_ = o.step("cleanup", func() (string, error) { return "", e.Runtime.Delete(cctx, id) })
		}
	}()
	if m.Scope == snapshot.ScopeData {
		err = e.resumeData(ctx, o, a, id, dir, m)
	} else {
		err = e.resumeFull(ctx, o, a, id, dir, opts)
	}
	if err != nil {
		return err
	}
	return e.waitReady(ctx, o, id, opts.Probe)
}

// WaitReady runs the readiness probe, if any, against a sandbox that was
// just booted, as Resume does after a restore.
func (e *Engine) WaitReady(ctx context.Context, a Actor, id string, p Probe) error {
	return e.waitReady(ctx, op{e: e, actor: a.ID, name: "boot"}, id, p)
}

func (e *Engine) waitReady(ctx context.Context, o op, id string, p Probe) error {
	if p.Command == nil && p.URL == "" {
		return nil
	}
	return o.step("probe", func() (string, error) { return e.probe(ctx, id, p) })
}

// ThawGPU attaches the devices a runtime detached, and resumes every CUDA
// process of a running sandbox that is locked or checkpointed; it does
// nothing when none is: a journal that finds an operation cut short between
// the GPU steps calls it to make sure no workload stays frozen.
func (e *Engine) ThawGPU(ctx context.Context, a Actor, id string) error {
	o := op{e: e, actor: a.ID, name: "thaw"}
	if h, ok := e.Runtime.(runtime.DeviceHolder); ok {
		if err := o.step("attach-devices", func() (string, error) { return "", h.AttachDevices(ctx, id) }); err != nil {
			return err
		}
	}
	return o.step("gpu-resume", func() (string, error) {
		rep, err := e.gpuResume(ctx, id, nil)
		return summary(rep), err
	})
}

func (e *Engine) resumeFull(ctx context.Context, o op, a Actor, id, dir string, opts ResumeOptions) error {
	err := o.step("restore", func() (string, error) {
		return "", e.Runtime.Restore(ctx, id, runtime.RestoreOptions{
			ImageDir: filepath.Join(dir, imageDir), Bundle: a.Bundle, Background: !e.EagerRestore,
			ConsoleLog: a.ConsoleLog, Notify: o.note,
		})
	})
	if err != nil {
		return err
	}
	if h, ok := e.Runtime.(runtime.DeviceHolder); ok {
		if err := o.step("attach-devices", func() (string, error) { return "", h.AttachDevices(ctx, id) }); err != nil {
			return err
		}
	}
	if !a.GPU {
		return nil
	}
	return o.step("gpu-resume", func() (string, error) {
		rep, err := e.gpuResume(ctx, id, opts.DeviceMap)
		return summary(rep), err
	})
}

func (e *Engine) resumeData(ctx context.Context, o op, a Actor, id, dir string, m *snapshot.Manifest) error {
	if err := o.step("restore-data", func() (string, error) { return "", restoreDurable(a, dir, m) }); err != nil {
		return err
	}
	return o.step("boot", func() (string, error) {
		if err := e.Runtime.Create(ctx, id, a.Bundle, runtime.CreateOptions{ConsoleLog: a.ConsoleLog, Notify: o.note}); err != nil {
			return "", err
		}
		return "", e.Runtime.Start(ctx, id)
	})
}

// Compatible refuses a snapshot this node cannot restore, with every
// reason; Resume runs it before any sandbox exists, and a caller about to
// fetch a snapshot can run it on the stored manifest first.
func (e *Engine) Compatible(ctx context.Context, a Actor, m *snapshot.Manifest) (compat.Result, error) {
	if m.Scope == snapshot.ScopeFull && m.GPU != nil && !a.GPU {
		return compat.Result{}, fmt.Errorf("%w: the snapshot holds GPU state, and the actor is not a GPU actor here", ErrRefused)
	}
	n, err := e.fingerprint(ctx)
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

// probeInterval is how often a readiness probe is retried.
const probeInterval = 100 * time.Millisecond

func (e *Engine) probe(ctx context.Context, id string, p Probe) (string, error) {
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
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("not ready within %s: %w", timeout, last)
		case <-tick.C:
		}
	}
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
