package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/cuda/group"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/testkit/fakecuda"
)

type harness struct {
	lib            *fakecuda.Lib
	env            map[string]string
	stdout, stderr bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	lib := fakecuda.Build(t)
	return &harness{lib: lib, env: map[string]string{libraryEnv: lib.Path}}
}

func (h *harness) run(args ...string) int {
	h.stdout.Reset()
	h.stderr.Reset()
	c := cli{stdout: &h.stdout, stderr: &h.stderr, getenv: func(k string) string { return h.env[k] }, self: 99999}
	return c.run(args)
}

func TestCompatGetState(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 77, 0)
	if rc := h.run("--get-state", "--pid", "77"); rc != 0 || h.stdout.String() != "running\n" {
		t.Fatalf("rc %d stdout %q stderr %q", rc, h.stdout.String(), h.stderr.String())
	}
	if rc := h.run("--get-state", "--pid=1"); rc != 1 {
		t.Fatalf("rc %d for a process that is not a CUDA process", rc)
	}
	if got, want := h.stderr.String(), "Error getting process state for process ID 1: \"initialization error\"\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestCompatActionsAndToggle(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 5, 0)
	for _, c := range []struct {
		args  []string
		state int
	}{
		{[]string{"--action", "lock", "-p", "5", "--timeout", "1500"}, 1},
		{[]string{"--action", "checkpoint", "-p5"}, 2},
		{[]string{"--action", "restore", "--pid", "5"}, 1},
		{[]string{"--action", "unlock", "--pid", "5"}, 0},
		{[]string{"--toggle", "--pid", "5"}, 2},
		{[]string{"--toggle", "--pid", "5"}, 0},
	} {
		if rc := h.run(c.args...); rc != 0 || h.stdout.Len() != 0 || h.stderr.Len() != 0 {
			t.Fatalf("%v: rc %d, stdout %q, stderr %q; want silent success", c.args, rc, h.stdout.String(), h.stderr.String())
		}
		if s := h.lib.State(5); s != c.state {
			t.Fatalf("%v: state %d, want %d", c.args, s, c.state)
		}
		if c.args[1] == "lock" {
			if got := h.lib.LastArgs(fakecuda.OpLock); got[0] != 0xdc || got[1] != 0x05 {
				t.Errorf("lock timeout bytes %x, want 1500 little-endian", got[:4])
			}
		}
	}
}

func TestCompatFailureLine(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 6, 1)
	if rc := h.run("--action", "lock", "--pid", "6"); rc != 1 {
		t.Fatalf("rc %d", rc)
	}
	want := "Could not lock on process ID 6: \"the operation cannot be performed in the present state\"\n"
	if h.stderr.String() != want {
		t.Errorf("stderr %q, want %q", h.stderr.String(), want)
	}
}

func TestToggleUndoesLockWhenCheckpointFails(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 8, 0)
	h.lib.Fail(t, fakecuda.OpCheckpoint, 8, 2)
	if rc := h.run("--toggle", "--pid", "8"); rc != 1 {
		t.Fatalf("rc %d", rc)
	}
	if s := h.lib.State(8); s != 0 {
		t.Errorf("state %d after failed toggle, want running", s)
	}
}

func TestCompatUsageErrors(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{
		{"--bogus"},
		{"--action", "explode", "--pid", "1"},
		{"--pid", "1"},
		{"--get-state"},
		{"--get-state", "--toggle", "--pid", "1"},
		{"--get-state", "--pid", "abc"},
		{"--action", "lock", "--pid", "1", "--device-map", "GPU-00112233-4455-6677-8899-aabbccddeeff=GPU-ffeeddcc-bbaa-9988-7766-554433221100"},
	} {
		if rc := h.run(args...); rc != 1 || !strings.Contains(h.stderr.String(), "Usage:") {
			t.Errorf("%v: rc %d, stderr %q; want exit 1 with a reason and the usage", args, rc, h.stderr.String())
		}
	}
	if rc := h.run("--help"); rc != 0 || !strings.Contains(h.stdout.String(), "--toggle") {
		t.Errorf("--help: rc %d", rc)
	}
	if n := h.lib.Calls(fakecuda.OpGetState); n != 0 {
		t.Errorf("usage errors reached the driver %d times", n)
	}
}

func procTree(t *testing.T, pids ...int) string {
	root := t.TempDir()
	for _, pid := range pids {
		dir := filepath.Join(root, strconv.Itoa(pid), "fd")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/nvidia-uvm", filepath.Join(dir, "3")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestSuspendResumeAllJSON(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 20, 0)
	h.lib.AddProcess(t, 21, 0)
	root := procTree(t, 20, 21, 22)
	if rc := h.run("suspend", "--all", "--json", "--proc", root); rc != 0 {
		t.Fatalf("rc %d: %s %s", rc, h.stdout.String(), h.stderr.String())
	}
	var rep group.Report
	if err := json.Unmarshal(h.stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, h.stdout.String())
	}
	if rep.Op != "suspend" || len(rep.Outcomes) != 2 || rep.Outcomes[1].PID != 21 || rep.DriverVersion != 13000 || rep.Error != "" {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(h.stdout.String(), `"after": "checkpointed"`) {
		t.Errorf("JSON states are not words: %s", h.stdout.String())
	}
	if rc := h.run("status", "--all", "--proc", root); rc != 0 || !strings.Contains(h.stdout.String(), "checkpointed") {
		t.Errorf("status: rc %d %q", rc, h.stdout.String())
	}
	if rc := h.run("resume", "--all", "--proc", root); rc != 0 || !strings.Contains(h.stdout.String(), "resumed 2 CUDA process(es)") {
		t.Fatalf("resume: rc %d %q %q", rc, h.stdout.String(), h.stderr.String())
	}
	if h.lib.State(20) != 0 || h.lib.State(21) != 0 {
		t.Error("processes not running after resume --all")
	}
}

func TestSuspendAllFailureExitsOne(t *testing.T) {
	h := newHarness(t)
	h.lib.AddProcess(t, 30, 0)
	h.lib.AddProcess(t, 31, 0)
	h.lib.Fail(t, fakecuda.OpCheckpoint, 31, 2)
	root := procTree(t, 30, 31)
	if rc := h.run("suspend", "--all", "--proc", root); rc != 1 {
		t.Fatalf("rc %d", rc)
	}
	if !strings.Contains(h.stderr.String(), "pid 31") || h.lib.State(30) != 0 {
		t.Errorf("stderr %q, state of 30: %d", h.stderr.String(), h.lib.State(30))
	}
	if rc := h.run("suspend", "--proc", root); rc != 2 || !strings.Contains(h.stderr.String(), "--all") {
		t.Errorf("suspend without --all: rc %d %q", rc, h.stderr.String())
	}
}

func TestHookModeSaveAndRestore(t *testing.T) {
	h := newHarness(t)
	h.env[hookModeEnv] = "bogus"
	if rc := h.run(); rc != 1 || !strings.Contains(h.stderr.String(), "save, restore or resume") {
		t.Errorf("bad mode: rc %d %q", rc, h.stderr.String())
	}
	// The hook scans the real /proc, where this test process is the only one
	// the fake knows. It holds no NVIDIA device file, so a save leaves it
	// running; once it is checkpointed, a restore brings it back.
	self := os.Getpid()
	h.lib.AddProcess(t, self, 0)
	h.env[hookModeEnv] = "save"
	if rc := h.run(); rc != 0 || h.lib.State(self) != 0 || !strings.Contains(h.stdout.String(), "suspended 0 CUDA process(es)") {
		t.Fatalf("save hook: rc %d state %d: %s %s", rc, h.lib.State(self), h.stdout.String(), h.stderr.String())
	}
	h.lib.Reset()
	h.lib.AddProcess(t, self, 2)
	h.env[hookModeEnv] = "restore"
	if rc := h.run(); rc != 0 || h.lib.State(self) != 0 {
		t.Fatalf("restore hook: rc %d state %d: %s", rc, h.lib.State(self), h.stderr.String())
	}
}

// TestToggleTakesTheDeviceMapFromItsEnvironment: runsc runs --toggle after
// a restore with no --device-map; the map the engine put in the restore's
// environment reaches the driver, and the helper says it applied it. A
// checkpoint's lock takes its timeout from the environment likewise.
func TestToggleTakesTheDeviceMapFromItsEnvironment(t *testing.T) {
	h := newHarness(t)
	const a, b = "GPU-00112233-4455-6677-8899-aabbccddeeff", "GPU-ffeeddcc-bbaa-9988-7766-554433221100"
	h.env[helper.DeviceMapEnv] = a + "=" + b + "," + b + "=" + a
	h.env[helper.LockTimeoutEnv] = "2500ms"
	h.lib.AddProcess(t, 7, 0)
	if rc := h.run("--toggle", "--pid", "7"); rc != 0 || h.lib.State(7) != 2 || h.stderr.Len() != 0 {
		t.Fatalf("checkpoint toggle: rc %d state %d stderr %q", rc, h.lib.State(7), h.stderr.String())
	}
	if got := h.lib.LastArgs(fakecuda.OpLock); got[0] != 0xc4 || got[1] != 0x09 {
		t.Errorf("lock timeout bytes %x, want 2500 little-endian from %s", got[:4], helper.LockTimeoutEnv)
	}
	if rc := h.run("--toggle", "--pid", "7"); rc != 0 || h.lib.State(7) != 0 {
		t.Fatalf("restore toggle: rc %d state %d stderr %q", rc, h.lib.State(7), h.stderr.String())
	}
	pairs := h.lib.LastPairs()
	if len(pairs) != 2 || pairs[0][0] != 0x00 || pairs[0][16] != 0xff || pairs[1][0] != 0xff || pairs[1][16] != 0x00 {
		t.Fatalf("the driver got the pairs %x; want the swap of the environment's map", pairs)
	}
	if !strings.Contains(h.stderr.String(), "restoring process ID 7 with device map "+a+"="+b+","+b+"="+a) {
		t.Errorf("the helper did not say it applied the map: %q", h.stderr.String())
	}
	// A map on the command line wins; a malformed one in the environment
	// is refused, with the process left checkpointed.
	h.run("--toggle", "--pid", "7")
	h.env[helper.DeviceMapEnv] = "nonsense"
	if rc := h.run("--toggle", "--pid", "7"); rc != 1 || h.lib.State(7) != 2 || !strings.Contains(h.stderr.String(), helper.DeviceMapEnv) {
		t.Fatalf("a malformed map: rc %d state %d stderr %q", rc, h.lib.State(7), h.stderr.String())
	}
}
