package group_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/group"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/testkit/fakecuda"
)

const (
	running      = 0
	locked       = 1
	checkpointed = 2
)

func setup(t *testing.T, states map[int]int) (*cuda.Driver, *fakecuda.Lib, []group.Process) {
	t.Helper()
	lib := fakecuda.Build(t)
	d, err := cuda.Open(lib.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	var procs []group.Process
	for pid := 1; pid <= 64; pid++ {
		if s, ok := states[pid]; ok {
			lib.AddProcess(t, pid, s)
			procs = append(procs, group.Process{PID: pid, State: cuda.ProcessState(s), HoldsDevice: s == running})
		}
	}
	return d, lib, procs
}

func wantStates(t *testing.T, lib *fakecuda.Lib, want map[int]int) {
	t.Helper()
	for pid, s := range want {
		if got := lib.State(pid); got != s {
			t.Errorf("pid %d: state %d, want %d", pid, got, s)
		}
	}
}

func TestSuspendAndResumeAll(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{11: running, 12: running, 13: running})
	out, err := group.Suspend(context.Background(), d, procs, group.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wantStates(t, lib, map[int]int{11: checkpointed, 12: checkpointed, 13: checkpointed})
	if len(out) != 3 || out[0].PID != 11 || out[2].After != cuda.StateCheckpointed {
		t.Errorf("outcomes %+v", out)
	}
	for i := range procs {
		procs[i].State = cuda.StateCheckpointed
	}
	if _, err := group.Resume(context.Background(), d, procs, group.Options{}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, lib, map[int]int{11: running, 12: running, 13: running})
}

func TestSuspendRollsBackWhenSecondOfThreeFails(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{21: running, 22: running, 23: running})
	lib.Fail(t, fakecuda.OpCheckpoint, 22, 999)
	_, err := group.Suspend(context.Background(), d, procs, group.Options{})
	var gerr *group.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("got %v, want *group.Error", err)
	}
	if len(gerr.Failures) != 1 || gerr.Failures[0].PID != 22 || !errors.Is(err, cuda.ErrorUnknown) {
		t.Errorf("failures %+v", gerr.Failures)
	}
	if len(gerr.UndoFailures) != 0 {
		t.Errorf("undo failures %+v", gerr.UndoFailures)
	}
	if !strings.Contains(err.Error(), "pid 22") || !strings.Contains(err.Error(), "put back") {
		t.Errorf("message %q should name pid 22 and say the group was put back", err)
	}
	wantStates(t, lib, map[int]int{21: running, 22: running, 23: running})
}

func TestSuspendLockTimeoutRollsBackOthers(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{31: running, 32: running})
	lib.SetBusy(32, 1)
	_, err := group.Suspend(context.Background(), d, procs, group.Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, cuda.ErrorTimeout) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if got := lib.LastArgs(fakecuda.OpLock); got[0] != 100 {
		t.Errorf("lock timeout sent as %d ms, want 100", got[0])
	}
	wantStates(t, lib, map[int]int{31: running, 32: running})
}

func TestSuspendReportsFailedUndo(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{41: running, 42: running})
	lib.Fail(t, fakecuda.OpLock, 42, 909)
	lib.Fail(t, fakecuda.OpRestore, 41, 999)
	_, err := group.Suspend(context.Background(), d, procs, group.Options{})
	var gerr *group.Error
	if !errors.As(err, &gerr) || len(gerr.UndoFailures) != 1 || gerr.UndoFailures[0].PID != 41 {
		t.Fatalf("got %v, want the failed undo of pid 41 reported", err)
	}
	if !strings.Contains(err.Error(), "undo of pid 41 failed") {
		t.Errorf("message %q", err)
	}
}

func TestSuspendFinishesPartialCheckpoint(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{51: locked, 52: checkpointed, 53: running})
	if _, err := group.Suspend(context.Background(), d, procs, group.Options{}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, lib, map[int]int{51: checkpointed, 52: checkpointed, 53: checkpointed})
	if n := lib.Calls(fakecuda.OpLock); n != 1 {
		t.Errorf("%d locks, want 1 (only the running process)", n)
	}
}

func TestResumeUnlocksLockedAndPassesDeviceMap(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{61: checkpointed, 62: locked})
	m, _ := gpu.ParseDeviceMap("GPU-00112233-4455-6677-8899-aabbccddeeff=GPU-ffeeddcc-bbaa-9988-7766-554433221100")
	if _, err := group.Resume(context.Background(), d, procs, group.Options{DeviceMap: m}); err != nil {
		t.Fatal(err)
	}
	wantStates(t, lib, map[int]int{61: running, 62: running})
	if n := lib.Calls(fakecuda.OpRestore); n != 1 {
		t.Errorf("%d restores, want 1", n)
	}
	if pairs := lib.LastPairs(); len(pairs) != 1 || pairs[0][0] != 0x00 || pairs[0][16] != 0xff {
		t.Errorf("device map reached the driver as %x", pairs)
	}
}

func TestResumeFailureCheckpointsTheOthersAgain(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{1: checkpointed, 2: checkpointed, 3: checkpointed})
	lib.Fail(t, fakecuda.OpRestore, 2, 2) // out of memory on the GPU
	_, err := group.Resume(context.Background(), d, procs, group.Options{})
	var gerr *group.Error
	if !errors.As(err, &gerr) || len(gerr.Failures) != 1 || gerr.Failures[0].PID != 2 {
		t.Fatalf("got %v", err)
	}
	wantStates(t, lib, map[int]int{1: checkpointed, 2: checkpointed, 3: checkpointed})
}

func TestCancelledContextTouchesNothing(t *testing.T) {
	d, lib, procs := setup(t, map[int]int{5: running})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := group.Suspend(ctx, d, procs, group.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if n := lib.Calls(fakecuda.OpLock); n != 0 {
		t.Errorf("%d locks after cancel", n)
	}
}

// fakeProc lays out a procfs entry: comm and fd links to the given targets.
func fakeProc(t *testing.T, root string, pid int, comm string, fds ...string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, target := range fds {
		if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScanFindsCudaProcessesOnly(t *testing.T) {
	d, _, _ := setup(t, map[int]int{10: running, 12: checkpointed, 15: running})
	root := t.TempDir()
	fakeProc(t, root, 10, "python", "/dev/null", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")
	fakeProc(t, root, 11, "nvidia-smi", "/dev/nvidiactl", "/dev/nvidia0") // NVML only: unknown to the driver
	fakeProc(t, root, 12, "python")                                       // checkpointed: no device files
	fakeProc(t, root, 13, "bash", "/dev/pts/0")
	fakeProc(t, root, 15, "stasis-cuda", "/dev/nvidiactl") // the caller itself
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	procs, err := group.Scanner{Driver: d, ProcRoot: root, Exclude: []int{15}}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want := []group.Process{
		{PID: 10, Command: "python", State: cuda.StateRunning, HoldsDevice: true},
		{PID: 12, Command: "python", State: cuda.StateCheckpointed},
	}
	if len(procs) != len(want) || procs[0] != want[0] || procs[1] != want[1] {
		t.Fatalf("Scan = %+v, want %+v", procs, want)
	}
	if s := group.ToSuspend(procs); len(s) != 2 {
		t.Errorf("ToSuspend = %+v", s)
	}
	if r := group.ToResume(procs); len(r) != 1 || r[0].PID != 12 {
		t.Errorf("ToResume = %+v", r)
	}
}

func TestScanMissingProcfs(t *testing.T) {
	d, _, _ := setup(t, nil)
	if _, err := (group.Scanner{Driver: d, ProcRoot: "/nonexistent"}).Scan(); err == nil || !strings.Contains(err.Error(), "/nonexistent") {
		t.Fatalf("got %v", err)
	}
}
