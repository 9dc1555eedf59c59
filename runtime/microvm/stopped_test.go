package microvm_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// TestStoppedQEMURefused: a QEMU stopped by SIGSTOP (a user, a debugger)
// answers neither its monitor nor, through it, the guest agent, for as
// long as the stop lasts. The calls that need it to answer (state, pause,
// checkpoint, detach, exec, the GPU's readiness) fail within seconds saying
// so and how to let it run, and change nothing: once it runs again they work,
// and the guest's memory is as it was.
func TestStoppedQEMURefused(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	const id = "stopped"
	f.boot(id, vmtest.Options{Devices: []microvm.Device{standIn}})
	before := f.counter(id, "incr")
	st, err := f.rt.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	t.Cleanup(func() {
		if !continued {
			_ = syscall.Kill(st.PID, syscall.SIGCONT)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); halt.Of(st.PID) == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU (pid %d) not seen stopped 10 s after SIGSTOP", st.PID)
		}
	}
	// Bounded, so that the old behaviour (a wait for as long as the stop
	// lasts) fails the test rather than hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	image := t.TempDir()
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"state", func() error { _, err := f.rt.State(ctx, id); return err }},
		{"pause", func() error { return f.rt.Pause(ctx, id) }},
		{"checkpoint", func() error {
			return f.rt.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: image, LeaveRunning: true})
		}},
		{"detach", func() error { return f.rt.DetachDevices(ctx, id) }},
		{"exec", func() error {
			_, err := f.rt.Exec(ctx, id, runtime.Process{Args: []string{"/counter", "get"}})
			return err
		}},
		{"gpu ready", func() error { return f.rt.GPUReady(ctx, id) }},
	} {
		err := c.call()
		t.Logf("%s: %v", c.name, err)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "kill -CONT") || ctx.Err() != nil {
			t.Fatalf("%s of a VM whose QEMU is stopped: %v; want a failed precondition that says kill -CONT", c.name, err)
		}
	}
	if entries, _ := os.ReadDir(image); len(entries) != 0 {
		t.Errorf("the refused checkpoint left %d files", len(entries))
	}
	continued = true
	if err := syscall.Kill(st.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if s := f.status(id); s != runtime.StatusRunning {
		t.Fatalf("once QEMU runs again the VM is %s", s)
	}
	if !f.hasStandIn(id) {
		t.Fatal("the refused detach took the device away")
	}
	pid, _, _ := strings.Cut(before, " ")
	if got := f.counter(id, "get"); got != pid+" 1" {
		t.Fatalf("counter after the stop: %q, want %q", got, pid+" 1")
	}
	if err := f.rt.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
}
