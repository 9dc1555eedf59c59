package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime"
)

// Create creates container id from the OCI bundle; Start runs its process.
// A bundle that lists /dev/nvidiactl among its devices is a GPU sandbox.
func (r *Runsc) Create(ctx context.Context, id, bundleDir string, opts runtime.CreateOptions) error {
	gpu, err := IsGPUBundle(bundleDir)
	if err != nil {
		return err
	}
	r.notifyGPU(gpu, opts.Notify)
	return r.runDetached(ctx, invocation{args: []string{"create", "--bundle", bundleDir, id}, gpu: gpu}, opts.ConsoleLog)
}

func (r *Runsc) notifyGPU(gpu bool, notify func(string)) {
	if !gpu || notify == nil {
		return
	}
	if notice := r.NvproxyNotice(); notice != "" {
		notify(notice)
	}
}

func (r *Runsc) Start(ctx context.Context, id string) error {
	_, err := r.run(ctx, invocation{args: []string{"start", id}})
	return err
}

func (r *Runsc) Exec(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	if len(p.Args) == 0 {
		return runtime.ExecResult{}, errors.New("exec: no command given")
	}
	args := []string{"exec"}
	if p.Cwd != "" {
		args = append(args, "--cwd", p.Cwd)
	}
	for _, e := range p.Env {
		args = append(args, "--env", e)
	}
	args = append(append(args, id), p.Args...)
	cmd, err := r.command(ctx, invocation{args: args})
	if err != nil {
		return runtime.ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	res := runtime.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && ctx.Err() == nil && !execFailed(stderr.String()) {
		res.ExitCode = exitErr.ExitCode()
		return res, nil
	}
	if err != nil {
		return res, r.commandError(ctx, []string{"exec", id, p.Args[0]}, err, stderr.String())
	}
	return res, nil
}

// execFailed tells runsc's own failures (no such container, no such binary)
// from the exec'd process exiting non-zero.
func execFailed(stderr string) bool {
	for _, s := range []string{"loading container", "error executing", "executable file not found", "no such file or directory", "FetchSpec failed"} {
		if strings.Contains(stderr, s) {
			return true
		}
	}
	return false
}

func (r *Runsc) Pause(ctx context.Context, id string) error {
	_, err := r.run(ctx, invocation{args: []string{"pause", id}})
	return err
}

func (r *Runsc) Resume(ctx context.Context, id string) error {
	_, err := r.run(ctx, invocation{args: []string{"resume", id}})
	return err
}

// Stop kills the container's processes and waits for it to stop.
func (r *Runsc) Stop(ctx context.Context, id string) error {
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	if st.Status == runtime.StatusStopped {
		return nil
	}
	if st.Status == runtime.StatusPaused {
		if err := r.Resume(ctx, id); err != nil {
			return err
		}
	}
	if _, err := r.run(ctx, invocation{args: []string{"kill", "--all", id, "KILL"}}); err != nil {
		return err
	}
	if st.Status == runtime.StatusCreated {
		return nil
	}
	// wait returns once the container's init process is gone; it fails when
	// the whole sandbox went with it, which is as good. State decides.
	_, waitErr := r.run(ctx, invocation{args: []string{"wait", id}})
	st, err = r.State(ctx, id)
	if err != nil {
		return err
	}
	if st.Status != runtime.StatusStopped {
		return fmt.Errorf("container %s is still %s after SIGKILL: %v", id, st.Status, waitErr)
	}
	return nil
}

// Delete removes the container whatever its state.
func (r *Runsc) Delete(ctx context.Context, id string) error {
	_, err := r.run(ctx, invocation{args: []string{"delete", "--force", id}})
	if err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

func (r *Runsc) State(ctx context.Context, id string) (runtime.State, error) {
	out, err := r.run(ctx, invocation{args: []string{"state", id}})
	if err != nil {
		return runtime.State{}, err
	}
	var st runtime.State
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state %s: %w", id, err)
	}
	return st, nil
}

// MemoryUsage reads the sandbox's memory use from runsc events --stats.
func (r *Runsc) MemoryUsage(ctx context.Context, id string) (uint64, error) {
	out, err := r.run(ctx, invocation{args: []string{"events", "--stats", id}})
	if err != nil {
		return 0, err
	}
	var ev struct {
		Data struct {
			Memory struct {
				Usage struct {
					Usage uint64 `json:"usage"`
				} `json:"usage"`
			} `json:"memory"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &ev); err != nil {
		return 0, fmt.Errorf("runsc events --stats %s: %w", id, err)
	}
	return ev.Data.Memory.Usage.Usage, nil
}

// IsGPUBundle tells whether the bundle gives the sandbox NVIDIA devices.
func IsGPUBundle(dir string) (bool, error) {
	spec, err := bundle.Load(dir)
	if err != nil {
		return false, err
	}
	return bundle.IsGPU(spec), nil
}
