package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// halts are the ways a sandbox process is kept from running, each with
// what the refusal's mend says and how the test lets it run again.
var halts = []struct {
	name, mend    string
	stop, restart func(pid int) error
}{
	{"SIGSTOP", "kill -CONT",
		func(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) },
		func(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }},
	{"frozen cgroup", "thaw it",
		func(pid int) error { return freeze(pid, true) },
		func(pid int) error { return freeze(pid, false) }},
}

// startSandbox creates and starts container id of bundle dir, deleted
// when the test ends, and returns its sandbox process's pid.
func startSandbox(t *testing.T, r *Runsc, dir, id string) int {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	if err := r.Create(ctx, id, dir, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	st, err := r.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st.PID
}

// TestStoppedSandboxRefused: runsc waits on a sandbox that cannot run for
// as long as it cannot. With the sandbox process stopped by SIGSTOP, then
// in a frozen cgroup, the commands that need it to answer (state, pause,
// checkpoint, exec) fail saying so and how to let it run, and change nothing:
// once it runs again they work.
func TestStoppedSandboxRefused(t *testing.T) {
	ctx := context.Background()
	r := newRunsc(t, Config{Network: "none"})
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	const id = "+stopped.1+"
	pid := startSandbox(t, r, dir, id)
	if got := r.sandboxPID(id); got != pid {
		t.Fatalf("sandbox pid read from runsc's state folder %d, runsc state says %d", got, pid)
	}
	for _, stop := range halts {
		t.Run(stop.name, func(t *testing.T) {
			if err := stop.stop(pid); err != nil {
				t.Fatal(err)
			}
			restarted := false
			t.Cleanup(func() {
				if !restarted {
					_ = stop.restart(pid)
				}
			})
			image := t.TempDir()
			for name, call := range map[string]func() error{
				"state": func() error { _, err := r.State(ctx, id); return err },
				"pause": func() error { return r.Pause(ctx, id) },
				"checkpoint": func() error {
					return r.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: image, LeaveRunning: true})
				},
				"exec": func() error {
					_, err := r.Exec(ctx, id, runtime.Process{Args: []string{"/counter", "get"}})
					return err
				},
			} {
				err := call()
				if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), stop.mend) {
					t.Errorf("%s of a sandbox that cannot run: %v; want a failed precondition that says %q", name, err, stop.mend)
				}
			}
			if entries, _ := os.ReadDir(image); len(entries) != 0 {
				t.Errorf("the refused checkpoint left %d files", len(entries))
			}
			restarted = true
			if err := stop.restart(pid); err != nil {
				t.Fatal(err)
			}
			if got, err := r.State(ctx, id); err != nil || got.Status != runtime.StatusRunning {
				t.Fatalf("state once it runs again: %+v, %v", got, err)
			}
			if err := r.Pause(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := r.Unpause(ctx, id); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStoppedSandboxDeleted: a sandbox that cannot run cannot answer
// runsc, but is stopped and deleted as any other where a kill takes effect
// on it (stopped by SIGSTOP; frozen by cgroup v2's freezer). Frozen by
// cgroup v1's, which holds even SIGKILL back, the stop is refused with how
// to thaw it, and works once it is thawed.
func TestStoppedSandboxDeleted(t *testing.T) {
	ctx := context.Background()
	r := newRunsc(t, Config{Network: "none"})
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	for i, stop := range halts {
		t.Run(stop.name, func(t *testing.T) {
			id := fmt.Sprintf("+stopped.%d+", i)
			pid := startSandbox(t, r, dir, id)
			if err := stop.stop(pid); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stop.restart(pid) })
			// A signal is delivered, and a freezer takes hold, a moment
			// after it is sent.
			var h *halt.Halt
			for deadline := time.Now().Add(10 * time.Second); h == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				h = halt.Of(pid)
			}
			if h == nil {
				t.Fatalf("process %d stopped (%s) is not seen stopped", pid, stop.name)
			}
			if h.Unkillable {
				if err := r.Stop(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "thaw it") {
					t.Fatalf("stop of a sandbox that a kill does not reach: %v", err)
				}
				if err := stop.restart(pid); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Stop(ctx, id); err != nil {
				t.Fatalf("stop of a sandbox that cannot run: %v", err)
			}
			if err := r.Delete(ctx, id); err != nil {
				t.Fatalf("delete of the killed sandbox: %v", err)
			}
			if _, err := r.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
				t.Fatalf("state after the delete: %v", err)
			}
		})
	}
}

// freeze freezes (or thaws) the freezer that holds process pid.
func freeze(pid int, frozen bool) error {
	dir, v2 := halt.Freezer(pid)
	switch {
	case dir == "":
		return fmt.Errorf("process %d is in no cgroup this test can freeze", pid)
	case v2:
		return os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(map[bool]string{true: "1", false: "0"}[frozen]), 0)
	}
	return os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]), 0)
}
