// Package conformance is the behaviour every runtime.Runtime must have, as
// a test suite that a runtime's own tests run against it (in the manner of
// containerd's snapshotter test suite): the lifecycle, exec and its errors,
// pause, checkpoint with the sandbox left running, restore into a new
// sandbox with the process's memory, and the answers about containers that
// do not exist. runtime/gvisor runs it on runsc, runtime/microvm on QEMU,
// internal/runtimetest on the service tests' fake.
package conformance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
)

// Harness is what the suite needs of a runtime's test.
type Harness struct {
	Runtime runtime.Runtime
	// Bundle writes a bundle whose process answers Counter's commands.
	Bundle func(t *testing.T) string
	// Counter is the command line that increments (verb "incr") or reads
	// ("get") the process's counter, answering "<instance> <value>".
	Counter func(verb string) []string
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Run("UnknownContainer", func(t *testing.T) { unknownContainer(t, h) })
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, h) })
}

func unknownContainer(t *testing.T, h Harness) {
	ctx := context.Background()
	if _, err := h.Runtime.State(ctx, "no-such-container"); !errors.Is(err, runtime.ErrNotFound) || errdefs.Code(err) != "not_found" {
		t.Errorf("State of a container that does not exist: %v; want runtime.ErrNotFound", err)
	}
	if err := h.Runtime.Delete(ctx, "no-such-container"); err != nil {
		t.Errorf("Delete of a container that does not exist: %v; want success", err)
	}
	if _, err := h.Runtime.Exec(ctx, "no-such-container", runtime.Process{Args: []string{"/bin/true"}}); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Exec in a container that does not exist: %v; want runtime.ErrNotFound", err)
	}
}

func lifecycle(t *testing.T, h Harness) {
	ctx := context.Background()
	rt := h.Runtime
	const id, restored = "conformance-a", "conformance-b"
	t.Cleanup(func() {
		_ = rt.Delete(context.Background(), id)
		_ = rt.Delete(context.Background(), restored)
	})
	bundle := h.Bundle(t)
	if err := rt.Create(ctx, id, bundle, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, rt, id, runtime.StatusRunning)
	inst := counter(t, h, id, "incr", "")
	counter(t, h, id, "get", inst+" 1")

	res, err := rt.Exec(ctx, id, runtime.Process{Args: []string{"/no/such/program"}})
	if err == nil && res.ExitCode == 0 || err != nil && errdefs.Code(err) != "not_found" {
		t.Errorf("Exec of a program that is not there: exit %d, %v; want a non-zero exit or a not_found error", res.ExitCode, err)
	}
	if mem, err := rt.MemoryUsage(ctx, id); err != nil || mem == 0 {
		t.Errorf("MemoryUsage: %d %v", mem, err)
	}

	if err := rt.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, rt, id, runtime.StatusPaused)
	if err := rt.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, rt, id, runtime.StatusRunning)

	image := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: image, LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	status(t, rt, id, runtime.StatusRunning)
	// The process runs on after the checkpoint; the image keeps what it
	// had then.
	counter(t, h, id, "incr", inst+" 2")
	used := filepath.Join(t.TempDir(), "used")
	if err := os.MkdirAll(used, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "leftover"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rt.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: used, LeaveRunning: true}); err == nil {
		t.Error("a checkpoint into a folder that holds a file worked; a fresh folder is required")
	}

	if err := rt.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.State(ctx, id); err == nil && st.Status != runtime.StatusStopped {
		t.Errorf("after Stop the container is %s", st.Status)
	}
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("after Delete, State says %v", err)
	}

	if err := rt.Restore(ctx, restored, runtime.RestoreOptions{ImageDir: image, Bundle: bundle}); err != nil {
		t.Fatal(err)
	}
	status(t, rt, restored, runtime.StatusRunning)
	counter(t, h, restored, "incr", inst+" 2")
	if err := rt.Delete(ctx, restored); err != nil {
		t.Fatal(err)
	}
}

func status(t *testing.T, rt runtime.Runtime, id string, want runtime.Status) {
	t.Helper()
	st, err := rt.State(context.Background(), id)
	if err != nil || st.Status != want {
		t.Fatalf("State of %s: %+v %v; want %s", id, st, err, want)
	}
}

// counter runs the counter command; want, when set, is its answer.
func counter(t *testing.T, h Harness, id, verb, want string) string {
	t.Helper()
	res, err := h.Runtime.Exec(context.Background(), id, runtime.Process{Args: h.Counter(verb)})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("counter %s in %s: exit %d, %v: %s", verb, id, res.ExitCode, err, res.Stderr)
	}
	got := strings.TrimSpace(string(res.Stdout))
	if want != "" && got != want {
		t.Fatalf("counter %s in %s: %q, want %q", verb, id, got, want)
	}
	inst, _, _ := strings.Cut(got, " ")
	return inst
}
