package gvisor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/internal/pty"
	"github.com/stasis-run/stasis/runtime"
)

// terminalDrain bounds how long the rest of a terminal's output is read
// after its command ended: a process the command left in the background
// may hold the terminal open.
const terminalDrain = 500 * time.Millisecond

// execOnTerminal runs p on a pseudo-terminal stasisd opens. runsc exec is
// given its replica end as its standard input, output and error and, told
// by the process file that they are a terminal, hands them to the
// sandbox's process as its controlling terminal (StdioIsPty); it is made
// the session leader of that terminal, so that a resize's SIGWINCH reaches
// it, and it forwards the signal to the process in the sandbox. runsc's
// own messages go to a log file, so that its failures are told from the
// process's output.
func (r *Runsc) execOnTerminal(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	master, replica, err := pty.Open()
	if err != nil {
		return runtime.ExecResult{}, err
	}
	defer master.Close()
	defer replica.Close()
	if err := pty.SetSize(master, p.Terminal.Size.Rows, p.Terminal.Size.Cols); err != nil {
		return runtime.ExecResult{}, err
	}
	dir, err := os.MkdirTemp("", "stasis-exec-")
	if err != nil {
		return runtime.ExecResult{}, err
	}
	defer os.RemoveAll(dir)
	process, err := r.execProcess(ctx, id, p)
	if err != nil {
		return runtime.ExecResult{}, err
	}
	processFile := dir + "/process.json"
	data, err := json.Marshal(process)
	if err == nil {
		err = os.WriteFile(processFile, data, 0o600)
	}
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("exec's process file: %w", err)
	}
	logFile := dir + "/runsc.log"
	// runsc writes the internal pid file once it forwards signals to the
	// process (after starting it): a resize before that would send a
	// SIGWINCH that runsc ignores, and the process would never hear of it.
	forwarding := dir + "/pid"
	cmd, err := r.command(ctx, invocation{args: []string{"--log", logFile, "exec", "--internal-pid-file", forwarding, "--process", processFile, id}, container: id})
	if err != nil {
		return runtime.ExecResult{}, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = replica, replica, replica
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		return runtime.ExecResult{}, fmt.Errorf("runsc exec: %w", err)
	}
	// Only runsc and the sandbox hold the replica now: the master end
	// reads end of file (EIO) once both let it go.
	replica.Close()
	output := make(chan error, 1)
	go func() { output <- copyTerminal(p.Stdout, master) }()
	if p.Stdin != nil {
		go func() { _, _ = io.Copy(master, p.Stdin) }()
	}
	stopResizing := make(chan struct{})
	defer close(stopResizing)
	go resizeTerminal(master, p.Terminal.Resize, forwarding, stopResizing)
	err = cmd.Wait()
	_ = master.SetReadDeadline(time.Now().Add(terminalDrain))
	<-output
	return r.execEnded(ctx, id, p, runtime.ExecResult{}, err, runscLogErrors(logFile))
}

// resizeTerminal gives the terminal behind master each size from resize,
// until stop, once runsc forwards signals to the process (the file
// forwarding exists): the kernel's SIGWINCH of a resize then reaches it. A
// size that comes before waits, the latest one kept, and runsc is checked
// for every 10 ms until then.
func resizeTerminal(master *os.File, resize <-chan runtime.WindowSize, forwarding string, stop <-chan struct{}) {
	var pending *runtime.WindowSize
	check := time.NewTicker(10 * time.Millisecond)
	defer check.Stop()
	ready := check.C
	for {
		select {
		case size, ok := <-resize:
			if !ok {
				resize = nil
				continue
			}
			pending = &size
		case <-ready:
			if _, err := os.Stat(forwarding); err == nil {
				check.Stop()
				ready = nil
			}
		case <-stop:
			return
		}
		if ready == nil && pending != nil {
			_ = pty.SetSize(master, pending.Rows, pending.Cols)
			pending = nil
		}
	}
}

// execProcess is the process runsc exec runs for p on a terminal: the
// container's own (its user, capabilities, limits, working folder and
// environment, as runsc exec gives a command on its command line) with p's
// command, p's environment over the container's and p's working folder
// where it names one. A process file replaces all of it, so without the
// container's environment a command named without its path is not found.
func (r *Runsc) execProcess(ctx context.Context, id string, p runtime.Process) (specs.Process, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return specs.Process{}, err
	}
	var spec specs.Spec
	data, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil || spec.Process == nil {
		return specs.Process{}, fmt.Errorf("exec on a terminal: the container's process in %s: %v", st.Bundle, cmp.Or(err, errors.New("the spec has none")))
	}
	process := *spec.Process
	process.Terminal, process.ConsoleSize = true, nil
	process.Args = p.Args
	process.Env = mergeEnv(process.Env, p.Env)
	process.Cwd = cmp.Or(p.Cwd, process.Cwd, "/")
	return process, nil
}

// mergeEnv is base with each NAME=VALUE of over in place of base's NAME.
func mergeEnv(base, over []string) []string {
	out := slices.Clone(base)
	for _, kv := range over {
		name, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(b string) bool { return strings.HasPrefix(b, name+"=") })
		out = append(out, kv)
	}
	return out
}

// copyTerminal copies a terminal's output from its master end to w until
// the terminal is let go by all who held it (EIO) or the read deadline.
func copyTerminal(w io.Writer, master *os.File) error {
	if w == nil {
		w = io.Discard
	}
	_, err := io.Copy(w, master)
	if errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}
