package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
	"github.com/stasis-run/stasis/internal/pauselock"
	"github.com/stasis-run/stasis/runtime"
)

// Create creates container id from the OCI bundle; Start runs its process.
// A bundle that lists /dev/nvidiactl among its devices is a GPU sandbox.
func (r *Runsc) Create(ctx context.Context, id, bundleDir string, opts runtime.CreateOptions) error {
	if err := r.CheckNewID(id); err != nil {
		return err
	}
	gpu, err := IsGPUBundle(bundleDir)
	if err != nil {
		return err
	}
	r.notifyGPU(gpu, opts.Notify)
	return r.startSandbox(ctx, id, bundleDir, invocation{args: []string{"create", "--bundle", bundleDir, id}, gpu: gpu}, opts.ConsoleLog)
}

// startSandbox runs a runsc command that makes sandbox id from bundleDir
// (create, restore). A runsc delete killed half way can leave the
// sandbox's overlay file (.gvisor.filestore.ID) in the root filesystem
// after the container itself is gone, and runsc then refuses a new sandbox
// of that id; such a file is removed and the command run once more.
func (r *Runsc) startSandbox(ctx context.Context, id, bundleDir string, inv invocation, consoleLog string) error {
	err := r.runDetached(ctx, inv, consoleLog)
	if err == nil || !strings.Contains(err.Error(), "already has a filestore file") {
		return err
	}
	if _, serr := r.State(ctx, id); !errors.Is(serr, runtime.ErrNotFound) {
		return err
	}
	spec, lerr := bundle.Load(bundleDir)
	if lerr != nil || spec.Root == nil {
		return err
	}
	root := spec.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundleDir, root)
	}
	// runsc's own cleanup of the failed attempt may have removed it.
	stale := filepath.Join(root, ".gvisor.filestore."+id)
	if rerr := os.Remove(stale); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
		return fmt.Errorf("%w (and its leftover %s could not be removed: %v)", err, stale, rerr)
	}
	return r.runDetached(ctx, inv, consoleLog)
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
	_, err := r.run(ctx, invocation{args: []string{"start", id}, container: id, talks: true})
	return err
}

func (r *Runsc) Exec(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	if len(p.Args) == 0 {
		return runtime.ExecResult{}, errors.New("exec: no command given")
	}
	// runsc exec would wait for a stopped sandbox to start the process for
	// as long as it stays stopped. Looked at once, before: a command that
	// runs on while the sandbox is stopped for a moment goes on after it.
	if stopped := r.stopped(id); stopped != nil {
		return runtime.ExecResult{}, fmt.Errorf("runsc exec %s: %w", id, stopped)
	}
	if p.Terminal != nil {
		return r.execOnTerminal(ctx, id, p)
	}
	args := []string{"exec"}
	if p.Cwd != "" {
		args = append(args, "--cwd", p.Cwd)
	}
	for _, e := range p.Env {
		args = append(args, "--env", e)
	}
	args = append(append(args, id), p.Args...)
	cmd, err := r.command(ctx, invocation{args: args, container: id})
	if err != nil {
		return runtime.ExecResult{}, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if p.Stdout != nil {
		cmd.Stdout = p.Stdout
	}
	if p.Stderr != nil {
		// runsc's own failure is told from what it writes on stderr:
		// its tail is kept beside the stream.
		cmd.Stderr = io.MultiWriter(p.Stderr, &tailBuffer{buf: &stderr, max: 64 << 10})
	}
	stdin, err := pipeStdin(cmd, p.Stdin)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	// runsc hands its standard output and error to the process in the
	// sandbox, which holds them as long as it runs: one killed at the
	// deadline, frozen, or left in the background would keep Wait waiting
	// on the pipes for ever (a probe stuck for minutes on a loaded node).
	// Past execDrain after runsc ended, what came is what there is.
	cmd.WaitDelay = execDrain
	err = cmd.Start()
	if err == nil {
		stdin()
		err = cmd.Wait()
		if errors.Is(err, exec.ErrWaitDelay) {
			err = nil
			if cmd.ProcessState != nil && !cmd.ProcessState.Success() {
				err = &exec.ExitError{ProcessState: cmd.ProcessState}
			}
		}
	}
	res := runtime.ExecResult{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if p.Stderr != nil {
		res.Stderr = nil
	}
	return r.execEnded(ctx, id, p, res, err, stderr.String())
}

// execDrain bounds how long an exec's output is read after runsc ended.
const execDrain = 2 * time.Second

// pipeStdin gives cmd its standard input from in, as the process reads
// it: the returned function, called once cmd started, copies it and
// closes the pipe at in's end. exec.Cmd's own copy would keep Wait waiting
// for in's next read after the process ended; this one is left to end
// with in.
func pipeStdin(cmd *exec.Cmd, in io.Reader) (func(), error) {
	if in == nil {
		return func() {}, nil
	}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	return func() {
		go func() {
			_, _ = io.Copy(w, in)
			w.Close()
		}()
	}, nil
}

// execEnded makes runsc exec's end the exec's result: the process's exit
// code, or runsc's own failure (said: what runsc said of it).
func (r *Runsc) execEnded(ctx context.Context, id string, p runtime.Process, res runtime.ExecResult, err error, said string) (runtime.ExecResult, error) {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && ctx.Err() == nil && !execFailed(said) {
		res.ExitCode = exitErr.ExitCode()
		return res, nil
	}
	if err != nil {
		err = r.commandError(ctx, []string{"exec", id, p.Args[0]}, err, said)
		if missingCommand(said) {
			err = errdefs.Mark(fmt.Errorf("%s is not in the sandbox: %w", p.Args[0], err), errdefs.ErrNotFound)
		}
		return res, err
	}
	return res, nil
}

// tailBuffer keeps the last max bytes written to it (at least), in buf.
type tailBuffer struct {
	buf *bytes.Buffer
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > t.max {
		t.buf.Next(extra)
	}
	return len(p), nil
}

// missingCommand tells from runsc exec's error that the program to run is
// not in the sandbox.
func missingCommand(stderr string) bool {
	return !strings.Contains(stderr, "loading container") &&
		(strings.Contains(stderr, "executable file not found") || strings.Contains(stderr, "no such file or directory"))
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

// Pause freezes container id, under its pause lock (package pauselock):
// the fence watchdog and the fleet agent pause sandboxes too, and runsc
// counts pauses that meet, leaving a sandbox frozen that it says runs.
func (r *Runsc) Pause(ctx context.Context, id string) error {
	return r.locked(ctx, id, "pause")
}

// PauseCommand is runsc pause of container id, with this runtime's
// state folder (runtime.PauseCommander).
func (r *Runsc) PauseCommand(id string) []string {
	return append(append([]string{r.path}, r.GlobalFlags()...), "pause", id)
}

var _ runtime.PauseCommander = (*Runsc)(nil)

// Unpause lets container id run again, under its pause lock.
func (r *Runsc) Unpause(ctx context.Context, id string) error {
	return r.locked(ctx, id, "resume")
}

// locked runs runsc subcommand on container id holding its pause lock.
func (r *Runsc) locked(ctx context.Context, id, subcommand string) error {
	release, err := pauselock.Hold(ctx, r.cfg.Root, id)
	if err != nil {
		return err
	}
	defer release()
	_, err = r.run(ctx, invocation{args: []string{subcommand, id}, container: id, talks: true})
	return err
}

// Stop kills the sandbox and waits until it is gone. A Stasis actor is the
// only container of its sandbox, so the sandbox process is killed directly:
// runsc's own kill of the container's processes leaves the sandbox about a
// second to wind down, and the GPU is released only when it exits.
func (r *Runsc) Stop(ctx context.Context, id string) error {
	st, err := r.State(ctx, id)
	if err != nil {
		// A stopped sandbox cannot say where it stands, but is killed
		// as any other where the kill takes effect while it is stopped.
		pid := r.sandboxPID(id)
		if h := halt.Of(pid); h == nil || h.Unkillable {
			return err
		}
		st = runtime.State{Status: runtime.StatusRunning, PID: pid}
	}
	if st.Status == runtime.StatusStopped {
		return nil
	}
	if st.PID <= 0 {
		return fmt.Errorf("container %s is %s but runsc reports no sandbox process", id, st.Status)
	}
	// Once the sandbox process has exited, its resources (the GPU among
	// them) are free; runsc reports the container stopped once the exited
	// process has been reaped by its parent.
	if err := killAndWait(ctx, st.PID); err != nil {
		return fmt.Errorf("stop container %s (sandbox pid %d): %w", id, st.PID, err)
	}
	return nil
}

// killAndWait sends SIGKILL through a pidfd, so that a recycled pid is never
// hit, and waits for the process to exit.
func killAndWait(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill: %w", err)
	}
	// A pidfd becomes readable when its process exits. Poll in slices so
	// that a cancelled context is noticed.
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for exit: %w", err)
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Delete removes the container whatever its state, with the bundle a
// restore of it may have run with.
func (r *Runsc) Delete(ctx context.Context, id string) error {
	_, err := r.run(ctx, invocation{args: []string{"delete", "--force", id}, container: id})
	if err != nil && !isNotFound(err) && !r.deletedAnyway(ctx, id, err) {
		return err
	}
	if dir := r.restoreBundleDir(id); dir != "" {
		return os.RemoveAll(dir)
	}
	return nil
}

// deletedAnyway tells whether a runsc delete that failed did its work.
// runsc stops the sandbox and removes the container's state before it
// removes the filestore files of the container's mounts, and reports one
// that is not there as a failure (it ignores the same for shared mounts;
// runsc/container/container.go). When that is all it reported and the
// container is gone, nothing is left behind.
func (r *Runsc) deletedAnyway(ctx context.Context, id string, err error) bool {
	if !onlyMissingFilestores(err.Error()) {
		return false
	}
	_, err = r.State(ctx, id)
	return isNotFound(err)
}

// onlyMissingFilestores tells whether every error runsc's delete reported
// (one per line after "destroying container: ") is a filestore file that
// did not exist.
func onlyMissingFilestores(said string) bool {
	_, errs, ok := strings.Cut(said, "destroying container: ")
	if !ok {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "failed to delete filestore file ") || !strings.HasSuffix(line, ": no such file or directory") {
			return false
		}
	}
	return true
}

// Wait is runtime.Waiter's: runsc wait, which asks the sandbox to answer
// when the container's process ends. Started after the end, it may not
// learn the exit status (the sandbox is gone, and with it the status).
func (r *Runsc) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	out, err := r.run(ctx, invocation{args: []string{"wait", id}, container: id})
	if err != nil {
		return runtime.Exit{}, err
	}
	var res struct {
		ExitStatus int `json:"exitStatus"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return runtime.Exit{}, fmt.Errorf("runsc wait %s: %w (said %q)", id, err, out)
	}
	return runtime.Exit{Status: res.ExitStatus}, nil
}

func (r *Runsc) State(ctx context.Context, id string) (runtime.State, error) {
	out, err := r.run(ctx, invocation{args: []string{"state", id}, container: id, talks: true})
	if err != nil {
		return runtime.State{}, err
	}
	var st runtime.State
	if err := json.Unmarshal(out, &st); err != nil {
		return st, fmt.Errorf("runsc state %s: %w", id, err)
	}
	// runsc says running until the dead sandbox has been reaped, which
	// init may do late when its parent is gone: a dead process is stopped.
	if st.Status != runtime.StatusStopped && st.PID > 0 && !alive(st.PID) {
		st.Status = runtime.StatusStopped
	}
	return st, nil
}

// alive tells whether pid runs (exists and is not a zombie).
func alive(pid int) bool {
	s := halt.ProcState(pid)
	return s != 0 && s != 'Z'
}

// MemoryUsage reads the sandbox's memory use from runsc events --stats.
func (r *Runsc) MemoryUsage(ctx context.Context, id string) (uint64, error) {
	out, err := r.run(ctx, invocation{args: []string{"events", "--stats", id}, container: id, talks: true})
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
