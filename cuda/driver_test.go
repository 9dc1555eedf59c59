package cuda_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/testkit/fakecuda"
)

func openFake(t *testing.T) (*cuda.Driver, *fakecuda.Lib) {
	t.Helper()
	lib := fakecuda.Build(t)
	d, err := cuda.Open(lib.Path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, lib
}

func TestOpenMissingLibraryNamesIt(t *testing.T) {
	_, err := cuda.Open("/nonexistent/libcuda.so.1")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libcuda.so.1") {
		t.Fatalf("Open of a missing library: got %v, want an error naming the path", err)
	}
}

func TestOpenRefusesDriverWithoutCheckpointAPI(t *testing.T) {
	lib := fakecuda.Build(t, "-DNO_CHECKPOINT_API")
	_, err := cuda.Open(lib.Path)
	if !errors.Is(err, cuda.ErrNoCheckpointAPI) {
		t.Fatalf("got %v, want ErrNoCheckpointAPI", err)
	}
	if !strings.Contains(err.Error(), "cuCheckpointProcessLock") {
		t.Errorf("error %q does not name a missing symbol", err)
	}
}

func TestInitFailureIsTyped(t *testing.T) {
	lib := fakecuda.Build(t)
	lib.SetInitResult(100)
	d, err := cuda.Open(lib.Path)
	if err != nil {
		t.Fatalf("Open must not call cuInit: %v", err)
	}
	defer d.Close()
	err = d.Init()
	if !errors.Is(err, cuda.ErrorNoDevice) {
		t.Fatalf("got %v, want CUDA_ERROR_NO_DEVICE", err)
	}
	if !strings.Contains(err.Error(), "no CUDA-capable device is detected") {
		t.Errorf("error %q lacks the driver's message", err)
	}
}

func TestStateMachineRoundTrip(t *testing.T) {
	d, lib := openFake(t)
	const pid = 4242
	lib.AddProcess(t, pid, 0)
	steps := []struct {
		op   func() error
		want cuda.ProcessState
	}{
		{func() error { return d.Lock(pid, 5000) }, cuda.StateLocked},
		{func() error { return d.Checkpoint(pid) }, cuda.StateCheckpointed},
		{func() error { return d.Restore(pid, nil) }, cuda.StateLocked},
		{func() error { return d.Unlock(pid) }, cuda.StateRunning},
	}
	for i, s := range steps {
		if err := s.op(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got, err := d.State(pid)
		if err != nil || got != s.want {
			t.Fatalf("step %d: state %v, %v; want %v", i, got, err, s.want)
		}
	}
	if n := lib.Calls(fakecuda.OpInit); n != 0 {
		t.Errorf("cuInit called %d times; the checkpoint calls need none", n)
	}
	tid, err := d.RestoreThreadID(pid)
	if err != nil || tid != pid+1 {
		t.Errorf("RestoreThreadID = %d, %v; want %d", tid, err, pid+1)
	}
}

func TestNotACudaProcessIsTypedError(t *testing.T) {
	d, _ := openFake(t)
	_, err := d.State(1)
	if !errors.Is(err, cuda.ErrorNotInitialized) {
		t.Fatalf("got %v, want CUDA_ERROR_NOT_INITIALIZED", err)
	}
	var cerr *cuda.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("%T is not a *cuda.Error", err)
	}
	if cerr.Name != "CUDA_ERROR_NOT_INITIALIZED" || cerr.Message != "initialization error" || cerr.PID != 1 || cerr.Op != "get-state" {
		t.Errorf("error fields %+v", cerr)
	}
}

func TestIllegalTransitionKeepsState(t *testing.T) {
	d, lib := openFake(t)
	lib.AddProcess(t, 7, 0)
	if err := d.Checkpoint(7); !errors.Is(err, cuda.ErrorIllegalState) {
		t.Fatalf("checkpoint of a running process: got %v, want CUDA_ERROR_ILLEGAL_STATE", err)
	}
	if s := lib.State(7); s != 0 {
		t.Errorf("state after refused checkpoint = %d, want running", s)
	}
}

func TestLockTimeoutLeavesProcessRunning(t *testing.T) {
	d, lib := openFake(t)
	lib.AddProcess(t, 9, 0)
	lib.SetBusy(9, 1)
	err := d.Lock(9, 250)
	if !errors.Is(err, cuda.ErrorTimeout) {
		t.Fatalf("lock of a busy process: got %v, want CUDA_ERROR_TIMEOUT", err)
	}
	if s := lib.State(9); s != 0 {
		t.Errorf("state after timed-out lock = %d, want running", s)
	}
}

func TestLockArgsLayout(t *testing.T) {
	d, lib := openFake(t)
	lib.AddProcess(t, 10, 0)
	if err := d.Lock(10, 0x01020304); err != nil {
		t.Fatal(err)
	}
	var want [64]byte
	binary.LittleEndian.PutUint32(want[0:4], 0x01020304)
	if got := lib.LastArgs(fakecuda.OpLock); got != want {
		t.Errorf("lock args\n got %x\nwant %x", got, want)
	}
	for _, c := range []struct {
		op   int
		call func() error
	}{
		{fakecuda.OpCheckpoint, func() error { return d.Checkpoint(10) }},
		{fakecuda.OpRestore, func() error { return d.Restore(10, nil) }},
		{fakecuda.OpUnlock, func() error { return d.Unlock(10) }},
	} {
		if err := c.call(); err != nil {
			t.Fatal(err)
		}
		if got := lib.LastArgs(c.op); got != [64]byte{} {
			t.Errorf("op %d args not zeroed: %x", c.op, got)
		}
	}
}

func TestRestoreDeviceMapLayout(t *testing.T) {
	d, lib := openFake(t)
	lib.AddProcess(t, 11, 2)
	m, err := gpu.ParseDeviceMap("GPU-00112233-4455-6677-8899-aabbccddeeff=GPU-ffeeddcc-bbaa-9988-7766-554433221100,GPU-0123456789abcdef0123456789abcdef=fedcba9876543210fedcba9876543210")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Restore(11, m); err != nil {
		t.Fatal(err)
	}
	args := lib.LastArgs(fakecuda.OpRestore)
	if binary.LittleEndian.Uint64(args[0:8]) == 0 {
		t.Error("gpuPairs pointer is NULL")
	}
	if n := binary.LittleEndian.Uint32(args[8:12]); n != 2 {
		t.Errorf("gpuPairsCount = %d, want 2", n)
	}
	if [52]byte(args[12:]) != [52]byte{} {
		t.Errorf("reserved bytes not zero: %x", args[12:])
	}
	pairs := lib.LastPairs()
	if len(pairs) != 2 {
		t.Fatalf("driver saw %d pairs, want 2", len(pairs))
	}
	for i, p := range m {
		var want [32]byte
		copy(want[:16], p.Old[:])
		copy(want[16:], p.New[:])
		if pairs[i] != want {
			t.Errorf("pair %d\n got %x\nwant %x", i, pairs[i], want)
		}
	}
}

func TestRestoreDeviceMapRefusedOnOldDriver(t *testing.T) {
	lib := fakecuda.Build(t)
	lib.SetDriverVersion(12080)
	d, err := cuda.Open(lib.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lib.AddProcess(t, 12, 2)
	m, _ := gpu.ParseDeviceMap("GPU-00112233-4455-6677-8899-aabbccddeeff=GPU-ffeeddcc-bbaa-9988-7766-554433221100")
	err = d.Restore(12, m)
	if !errors.Is(err, cuda.ErrDeviceMapUnsupported) || !strings.Contains(err.Error(), "12.8") {
		t.Fatalf("got %v, want ErrDeviceMapUnsupported naming driver API 12.8", err)
	}
	if n := lib.Calls(fakecuda.OpRestore); n != 0 {
		t.Errorf("the driver was called %d times; a refused map must not reach it", n)
	}
	if err := d.Restore(12, nil); err != nil {
		t.Errorf("restore without a map on 12.8: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	d, lib := openFake(t)
	const n = 32
	for pid := 100; pid < 100+n; pid++ {
		lib.AddProcess(t, pid, 0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for pid := 100; pid < 100+n; pid++ {
		wg.Go(func() {
			if err := d.Lock(pid, 0); err != nil {
				errs <- err
				return
			}
			errs <- d.Checkpoint(pid)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	for pid := 100; pid < 100+n; pid++ {
		if s := lib.State(pid); s != 2 {
			t.Errorf("pid %d state %d, want checkpointed", pid, s)
		}
	}
}
