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
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/testkit/testactor"
)

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
	if got := r.sandboxPID(id); got != st.PID {
		t.Fatalf("sandbox pid read from runsc's state folder %d, runsc state says %d", got, st.PID)
	}
	for _, stop := range []struct {
		name, mend    string
		stop, restart func() error
	}{
		{"SIGSTOP", fmt.Sprintf("kill -CONT %d", st.PID),
			func() error { return syscall.Kill(st.PID, syscall.SIGSTOP) },
			func() error { return syscall.Kill(st.PID, syscall.SIGCONT) }},
		{"frozen cgroup", "thaw it",
			func() error { return freeze(st.PID, true) },
			func() error { return freeze(st.PID, false) }},
	} {
		t.Run(stop.name, func(t *testing.T) {
			if err := stop.stop(); err != nil {
				t.Fatal(err)
			}
			restarted := false
			t.Cleanup(func() {
				if !restarted {
					_ = stop.restart()
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
			if err := stop.restart(); err != nil {
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
	for i, stop := range []struct {
		name          string
		stop, restart func(pid int) error
	}{
		{"SIGSTOP",
			func(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) },
			func(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }},
		{"frozen cgroup",
			func(pid int) error { return freeze(pid, true) },
			func(pid int) error { return freeze(pid, false) }},
	} {
		t.Run(stop.name, func(t *testing.T) {
			id := fmt.Sprintf("+stopped.%d+", i)
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
			if err := stop.stop(st.PID); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = stop.restart(st.PID) })
			// A signal is delivered, and a freezer takes hold, a moment
			// after it is sent.
			var h *halt
			for deadline := time.Now().Add(10 * time.Second); h == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				h = haltOf(st.PID)
			}
			if h == nil {
				t.Fatalf("process %d stopped (%s) is not seen stopped", st.PID, stop.name)
			}
			if h.unkillable {
				if err := r.Stop(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "thaw it") {
					t.Fatalf("stop of a sandbox that a kill does not reach: %v", err)
				}
				if err := stop.restart(st.PID); err != nil {
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

// freeze freezes (or thaws) the cgroup of process pid: cgroup v2's where
// the machine has it, else v1's freezer.
func freeze(pid int, frozen bool) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(data)) {
		_, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		controllers, cgroup, _ := strings.Cut(rest, ":")
		switch {
		case controllers == "" && cgroup != "/":
			value := map[bool]string{true: "1", false: "0"}[frozen]
			return os.WriteFile(filepath.Join("/sys/fs/cgroup", cgroup, "cgroup.freeze"), []byte(value), 0)
		case hasController(controllers, "freezer"):
			value := map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]
			return os.WriteFile(filepath.Join("/sys/fs/cgroup/freezer", cgroup, "freezer.state"), []byte(value), 0)
		}
	}
	return fmt.Errorf("process %d is in no cgroup this test can freeze: %q", pid, data)
}
