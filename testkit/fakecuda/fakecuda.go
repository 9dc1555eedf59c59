// Package fakecuda builds and drives a stand-in libcuda for tests that run
// without a GPU. The C source is a state machine of the driver's checkpoint
// API over made-up process ids, with failures a test can inject and a record
// of the argument bytes each call was given.
package fakecuda

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
)

//go:embed csrc/fakecuda.c
var source []byte

// Operations, as the C source numbers them.
const (
	OpGetState = iota
	OpLock
	OpCheckpoint
	OpRestore
	OpUnlock
	OpRestoreTID
	OpInit
)

// Lib is one built copy of the fake. Each Build gives a library at a new path,
// so the dynamic loader keeps its state apart from every other test's.
type Lib struct {
	Path string

	Reset            func()
	SetDriverVersion func(v int32)
	SetInitResult    func(rc int32)
	addProcess       func(pid, state int32) int32
	SetBusy          func(pid int32, busy int32)
	fail             func(op, pid, code int32) int32
	state            func(pid int32) int32
	calls            func(op int32) int32
	lastArgs         func(op int32, out *byte)
	lastPairs        func(out *byte) uint32
}

// Build compiles the fake with the system C compiler into a temporary folder
// and loads its controls. The test fails if no C compiler is installed.
// Defines such as "-DNO_CHECKPOINT_API" (a driver older than CUDA 12.8)
// change what the fake exports.
func Build(t testing.TB, defines ...string) *Lib {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "fakecuda.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, append(defines, "-shared", "-fPIC", "-O1", "-o", lib, src, "-lpthread")...).CombinedOutput(); err != nil {
		t.Fatalf("build fake libcuda with %s (a C compiler is needed for these tests): %v\n%s", cc, err, out)
	}
	handle, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatalf("load fake libcuda: %v", err)
	}
	t.Cleanup(func() { _ = purego.Dlclose(handle) })
	l := &Lib{Path: lib}
	for name, fptr := range map[string]any{
		"fake_reset":              &l.Reset,
		"fake_set_driver_version": &l.SetDriverVersion,
		"fake_set_init_result":    &l.SetInitResult,
		"fake_add_process":        &l.addProcess,
		"fake_set_busy":           &l.SetBusy,
		"fake_fail":               &l.fail,
		"fake_state":              &l.state,
		"fake_calls":              &l.calls,
		"fake_last_args":          &l.lastArgs,
		"fake_last_pairs":         &l.lastPairs,
	} {
		purego.RegisterLibFunc(fptr, handle, name)
	}
	return l
}

// AddProcess makes pid a CUDA process in the given state (0 running, 1 locked,
// 2 checkpointed, 3 failed).
func (l *Lib) AddProcess(t testing.TB, pid int, state int) {
	t.Helper()
	if l.addProcess(int32(pid), int32(state)) == 0 {
		t.Fatal("fake libcuda: too many processes")
	}
}

// Fail makes the next call of op on pid (0: on any pid) return the CUresult code.
func (l *Lib) Fail(t testing.TB, op, pid, code int) {
	t.Helper()
	if l.fail(int32(op), int32(pid), int32(code)) == 0 {
		t.Fatal("fake libcuda: too many injected failures")
	}
}

// State is pid's state in the fake, or -1 for a pid it does not know.
func (l *Lib) State(pid int) int { return int(l.state(int32(pid))) }

// Calls counts the calls of op so far.
func (l *Lib) Calls(op int) int { return int(l.calls(int32(op))) }

// LastArgs is the 64 argument bytes the last call of op received.
func (l *Lib) LastArgs(op int) [64]byte {
	var b [64]byte
	l.lastArgs(int32(op), &b[0])
	return b
}

// LastPairs is the device map the last restore with one received, as the raw
// 32-byte CUcheckpointGpuPair records.
func (l *Lib) LastPairs() [][32]byte {
	var buf [16 * 32]byte
	n := l.lastPairs(&buf[0])
	pairs := make([][32]byte, n)
	for i := range pairs {
		copy(pairs[i][:], buf[i*32:])
	}
	return pairs
}
