// Package conformance is the behaviour every runtime.Runtime must have, as
// a test suite that a runtime's own tests run against it (in the manner of
// containerd's snapshotter test suite), in named cases that each start
// from nothing, so that one failing hides none of the others: the
// lifecycle, exec and its errors, pause, checkpoint with the sandbox left
// running, restore into a new sandbox with the process's memory, the
// answers about containers that do not exist, and the optional interfaces
// a runtime implements (DeviceHolder, GPUAgent, PauseCommander).
// runtime/gvisor runs it on runsc, runtime/microvm on QEMU,
// testkit/runtimetest on the service tests' fake.
package conformance

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fencefile"
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

// A Case is one behaviour, checked on sandboxes of its own.
type Case struct {
	Name string
	Run  func(t *testing.T, h Harness)
}

// Cases are the suite's cases for h's runtime: every runtime's, then those
// of the optional interfaces it implements.
func Cases(h Harness) []Case {
	cases := []Case{
		{"UnknownContainer", unknownContainer},
		{"CreateStartExec", createStartExec},
		{"ExecOfAMissingProgram", execOfAMissingProgram},
		{"MemoryUsage", memoryUsage},
		{"PauseUnpause", pauseUnpause},
		{"CheckpointLeavesRunning", checkpointLeavesRunning},
		{"CheckpointNeedsAFreshFolder", checkpointNeedsAFreshFolder},
		{"StopThenDelete", stopThenDelete},
		{"RestoreKeepsMemory", restoreKeepsMemory},
	}
	if _, ok := h.Runtime.(runtime.DeviceHolder); ok {
		cases = append(cases, Case{"DeviceHolder", deviceHolder})
	}
	if _, ok := h.Runtime.(runtime.GPUAgent); ok {
		cases = append(cases, Case{"GPUAgentWithoutAGPU", gpuAgentWithoutAGPU})
	}
	if _, ok := h.Runtime.(runtime.PauseCommander); ok {
		cases = append(cases, Case{"PauseCommand", pauseCommand}, Case{"PausesThatMeet", pausesThatMeet})
	}
	return cases
}

// Run runs every case of Cases as a subtest.
func Run(t *testing.T, h Harness) {
	for _, c := range Cases(h) {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, h) })
	}
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

// start creates and starts a sandbox of the harness's bundle, removed when
// the test ends, and returns its id, its bundle and its process's
// instance.
func start(t *testing.T, h Harness, name string) (id, bundle, inst string) {
	t.Helper()
	ctx := context.Background()
	id = "conformance-" + name
	t.Cleanup(func() { _ = h.Runtime.Delete(context.Background(), id) })
	bundle = h.Bundle(t)
	if err := h.Runtime.Create(ctx, id, bundle, runtime.CreateOptions{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := h.Runtime.Start(ctx, id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	inst = counter(t, h, id, "incr", "")
	return id, bundle, inst
}

func createStartExec(t *testing.T, h Harness) {
	id, _, inst := start(t, h, "exec")
	counter(t, h, id, "get", inst+" 1")
	counter(t, h, id, "incr", inst+" 2")
}

func execOfAMissingProgram(t *testing.T, h Harness) {
	id, _, inst := start(t, h, "missing")
	res, err := h.Runtime.Exec(context.Background(), id, runtime.Process{Args: []string{"/no/such/program"}})
	if err == nil && res.ExitCode == 0 || err != nil && errdefs.Code(err) != "not_found" {
		t.Errorf("Exec of a program that is not there: exit %d, %v; want a non-zero exit or a not_found error", res.ExitCode, err)
	}
	counter(t, h, id, "get", inst+" 1")
}

func memoryUsage(t *testing.T, h Harness) {
	id, _, _ := start(t, h, "memory")
	if mem, err := h.Runtime.MemoryUsage(context.Background(), id); err != nil || mem == 0 {
		t.Errorf("MemoryUsage: %d %v", mem, err)
	}
}

func pauseUnpause(t *testing.T, h Harness) {
	id, _, inst := start(t, h, "pause")
	ctx := context.Background()
	if err := h.Runtime.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, h.Runtime, id, runtime.StatusPaused)
	if err := h.Runtime.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	counter(t, h, id, "incr", inst+" 2")
}

func checkpointLeavesRunning(t *testing.T, h Harness) {
	id, _, inst := start(t, h, "checkpoint")
	image := filepath.Join(t.TempDir(), "image")
	if err := h.Runtime.Checkpoint(context.Background(), id, runtime.CheckpointOptions{ImageDir: image, LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	counter(t, h, id, "incr", inst+" 2")
	if entries, err := os.ReadDir(image); err != nil || len(entries) == 0 {
		t.Errorf("the checkpoint wrote nothing into its folder: %v", err)
	}
}

func checkpointNeedsAFreshFolder(t *testing.T, h Harness) {
	id, _, inst := start(t, h, "used-folder")
	used := filepath.Join(t.TempDir(), "used")
	if err := os.MkdirAll(used, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "leftover"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Runtime.Checkpoint(context.Background(), id, runtime.CheckpointOptions{ImageDir: used, LeaveRunning: true}); err == nil {
		t.Error("a checkpoint into a folder that holds a file worked; a fresh folder is required")
	}
	counter(t, h, id, "get", inst+" 1")
}

func stopThenDelete(t *testing.T, h Harness) {
	id, _, _ := start(t, h, "stop")
	ctx := context.Background()
	if err := h.Runtime.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := h.Runtime.State(ctx, id); err == nil && st.Status != runtime.StatusStopped {
		t.Errorf("after Stop the container is %s", st.Status)
	}
	if err := h.Runtime.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Runtime.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("after Delete, State says %v", err)
	}
	if err := h.Runtime.Delete(ctx, id); err != nil {
		t.Errorf("a second Delete: %v; want success", err)
	}
}

func restoreKeepsMemory(t *testing.T, h Harness) {
	id, bundle, inst := start(t, h, "restore-from")
	ctx := context.Background()
	image := filepath.Join(t.TempDir(), "image")
	if err := h.Runtime.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: image, LeaveRunning: true}); err != nil {
		t.Fatal(err)
	}
	counter(t, h, id, "incr", inst+" 2")
	if err := h.Runtime.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := h.Runtime.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	restored := "conformance-restore-to"
	t.Cleanup(func() { _ = h.Runtime.Delete(context.Background(), restored) })
	if err := h.Runtime.Restore(ctx, restored, runtime.RestoreOptions{ImageDir: image, Bundle: bundle}); err != nil {
		t.Fatal(err)
	}
	status(t, h.Runtime, restored, runtime.StatusRunning)
	// The image's memory: the count it had at the checkpoint, the same
	// process instance.
	counter(t, h, restored, "incr", inst+" 2")
}

// deviceHolder: the engine's sequence around a checkpoint (detach,
// checkpoint, attach) leaves the sandbox running with its memory; an
// attach with nothing missing does nothing; both refuse a container that
// does not exist.
func deviceHolder(t *testing.T, h Harness) {
	d := h.Runtime.(runtime.DeviceHolder)
	id, _, inst := start(t, h, "devices")
	ctx := context.Background()
	if err := d.AttachDevices(ctx, id); err != nil {
		t.Fatalf("AttachDevices with nothing missing: %v", err)
	}
	if err := d.DetachDevices(ctx, id); err != nil {
		t.Fatalf("DetachDevices: %v", err)
	}
	if err := h.Runtime.Checkpoint(ctx, id, runtime.CheckpointOptions{ImageDir: filepath.Join(t.TempDir(), "image"), LeaveRunning: true}); err != nil {
		t.Fatalf("Checkpoint after DetachDevices: %v", err)
	}
	for range 2 {
		if err := d.AttachDevices(ctx, id); err != nil {
			t.Fatalf("AttachDevices: %v", err)
		}
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	counter(t, h, id, "incr", inst+" 2")
	if err := d.DetachDevices(ctx, "no-such-container"); err == nil {
		t.Error("DetachDevices of a container that does not exist worked")
	}
	if err := d.AttachDevices(ctx, "no-such-container"); err == nil {
		t.Error("AttachDevices of a container that does not exist worked")
	}
}

// gpuAgentWithoutAGPU: in a sandbox without a GPU the GPU steps have
// nothing to do, say so, and leave the workload as it was; a container
// that does not exist is refused.
func gpuAgentWithoutAGPU(t *testing.T, h Harness) {
	g := h.Runtime.(runtime.GPUAgent)
	id, _, inst := start(t, h, "gpu-agent")
	ctx := context.Background()
	if err := g.GPUReady(ctx, id); err != nil {
		t.Fatalf("GPUReady: %v", err)
	}
	rep, err := g.GPUSuspend(ctx, id, 10*time.Second)
	if err != nil || rep.Skipped == "" && len(rep.Processes) != 0 {
		t.Fatalf("GPUSuspend without a GPU: %+v %v; want nothing done", rep, err)
	}
	if rep, err := g.GPUResume(ctx, id, nil); err != nil || rep.Skipped == "" && len(rep.Processes) != 0 {
		t.Fatalf("GPUResume without a GPU: %+v %v; want nothing done", rep, err)
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	counter(t, h, id, "incr", inst+" 2")
	if err := g.GPUReady(ctx, "no-such-container"); err == nil {
		t.Error("GPUReady of a container that does not exist worked")
	}
}

// pauseCommand: the command line another program runs to pause a sandbox
// pauses it, and the runtime sees it paused and unpauses it.
func pauseCommand(t *testing.T, h Harness) {
	p := h.Runtime.(runtime.PauseCommander)
	id, _, inst := start(t, h, "pause-command")
	args := p.PauseCommand(id)
	if len(args) == 0 {
		t.Fatal("PauseCommand is empty")
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	status(t, h.Runtime, id, runtime.StatusPaused)
	if err := h.Runtime.Unpause(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	counter(t, h, id, "incr", inst+" 2")
}

// pausesThatMeet: the runtime's pauses and the fence's pause commands (as
// the watchdog and the fleet agent run them, package fencefile) of one
// sandbox at the same moment leave it paused once: one unpause lets it run
// again and answer. (runsc counts pauses that meet: without the pause
// lock the sandbox stayed frozen while runsc said it ran.)
func pausesThatMeet(t *testing.T, h Harness) {
	p := h.Runtime.(runtime.PauseCommander)
	id, _, inst := start(t, h, "pauses-meet")
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _ = h.Runtime.Pause(ctx, id) }) // the losers find it paused
		wg.Go(func() { fencefile.Run(ctx, [][]string{p.PauseCommand(id)}, slog.New(slog.DiscardHandler)) })
	}
	wg.Wait()
	status(t, h.Runtime, id, runtime.StatusPaused)
	if err := h.Runtime.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	status(t, h.Runtime, id, runtime.StatusRunning)
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := h.Runtime.Exec(tctx, id, runtime.Process{Args: h.Counter("incr")})
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != inst+" 2" {
		t.Fatalf("after pauses that met and one unpause, counter incr: %q exit %d, %v: %s (a sandbox still frozen does not answer)", res.Stdout, res.ExitCode, err, res.Stderr)
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
