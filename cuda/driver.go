package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/stasis-run/stasis/gpu"
)

// DefaultLibrary is the name Open loads when given no path: the soname that
// the NVIDIA driver installs and container toolkits mount into sandboxes.
const DefaultLibrary = "libcuda.so.1"

// searchDirs are where NVIDIA's installers and container toolkits put the
// driver library. Open looks there when the loader cannot find DefaultLibrary
// by itself, as happens in a helper that runsc starts with an empty
// environment (no LD_LIBRARY_PATH).
var searchDirs = []string{
	"/usr/local/nvidia/lib64",
	"/usr/lib/x86_64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu",
	"/usr/lib64",
	"/usr/lib",
}

// DeviceMapMinVersion is the first CUDA driver API version (13.0) whose
// restore arguments carry a device map.
const DeviceMapMinVersion = 13000

// Driver is a loaded libcuda. Its methods are safe for concurrent use.
type Driver struct {
	path    string
	handle  uintptr
	version int

	closeOnce sync.Once

	init             func(flags uint32) Result
	cuGetErrorName   func(code Result, name **byte) Result
	cuGetErrorString func(code Result, msg **byte) Result

	getState   func(pid int32, state *ProcessState) Result
	restoreTID func(pid int32, tid *int32) Result
	lock       func(pid int32, args *lockArgs) Result
	checkpoint func(pid int32, args *checkpointArgs) Result
	restore    func(pid int32, args *restoreArgs) Result
	unlock     func(pid int32, args *unlockArgs) Result
}

// The argument structs of the checkpoint calls. Each is 64 bytes, zeroed but
// for the fields set; layout_test.go holds them to the driver's byte layout.
type (
	lockArgs struct {
		timeoutMs uint32
		_         uint32
		_         [7]uint64
	}
	checkpointArgs struct{ _ [8]uint64 }
	unlockArgs     struct{ _ [8]uint64 }
	// restoreArgs is the CUDA 13.0 layout. Before 13.0 the struct was all
	// reserved, which is the same bytes when no device map is given.
	restoreArgs struct {
		gpuPairs      *gpuPair
		gpuPairsCount uint32
		_             [52]byte
	}
	gpuPair struct {
		oldUUID gpu.UUID
		newUUID gpu.UUID
	}
)

// Open loads the driver library at path and checks that it exports the
// checkpoint API. With an empty path it loads
// DefaultLibrary through the dynamic loader, then from the folders where
// drivers are usually installed.
func Open(path string) (*Driver, error) {
	handle, path, err := load(path)
	if err != nil {
		return nil, err
	}
	d := &Driver{path: path, handle: handle}
	if err := d.bind(); err != nil {
		_ = purego.Dlclose(handle)
		return nil, err
	}
	var driverGetVersion func(version *int32) Result
	if err := d.bindSymbols(map[string]any{"cuInit": &d.init, "cuDriverGetVersion": &driverGetVersion}); err != nil {
		_ = purego.Dlclose(handle)
		return nil, err
	}
	var version int32
	if rc := driverGetVersion(&version); rc != Success {
		_ = purego.Dlclose(handle)
		return nil, d.newError("driver-get-version", 0, rc)
	}
	d.version = int(version)
	return d, nil
}

// CheckpointAPI loads the driver library the way stasis-cuda does and
// says whether it exports the checkpoint API. Loading does not initialise
// the driver, so it is cheap and touches no GPU: a node's fingerprint
// records its answer (node.Collector.CheckpointAPI).
func CheckpointAPI() error {
	d, err := Open("")
	if err != nil {
		return err
	}
	return d.Close()
}

// Init runs cuInit. The checkpoint calls do not need it (measured with
// driver 580.159.04: a process that never ran cuInit locked, checkpointed,
// restored and unlocked another), and it costs about 100 ms while no process
// holds the GPU, so Open leaves it to callers that use the rest of the
// driver API.
func (d *Driver) Init() error {
	if rc := d.init(0); rc != Success {
		return d.newError("init", 0, rc)
	}
	return nil
}

func load(path string) (uintptr, string, error) {
	const mode = purego.RTLD_NOW | purego.RTLD_LOCAL
	if path != "" {
		handle, err := purego.Dlopen(path, mode)
		if err != nil {
			return 0, "", fmt.Errorf("load CUDA driver %s: %w", path, err)
		}
		return handle, path, nil
	}
	handle, firstErr := purego.Dlopen(DefaultLibrary, mode)
	if firstErr == nil {
		return handle, DefaultLibrary, nil
	}
	for _, dir := range searchDirs {
		candidate := filepath.Join(dir, DefaultLibrary)
		if _, err := os.Stat(candidate); err != nil {
			continue
		}
		if handle, err := purego.Dlopen(candidate, mode); err == nil {
			return handle, candidate, nil
		}
	}
	return 0, "", fmt.Errorf("load CUDA driver %s: %w (not found in %s either; is the NVIDIA driver installed? give the library's path explicitly)", DefaultLibrary, firstErr, strings.Join(searchDirs, ", "))
}

func (d *Driver) bind() error {
	if err := d.bindSymbols(map[string]any{
		"cuGetErrorName":   &d.cuGetErrorName,
		"cuGetErrorString": &d.cuGetErrorString,
	}); err != nil {
		return err
	}
	err := d.bindSymbols(map[string]any{
		"cuCheckpointProcessGetState":           &d.getState,
		"cuCheckpointProcessGetRestoreThreadId": &d.restoreTID,
		"cuCheckpointProcessLock":               &d.lock,
		"cuCheckpointProcessCheckpoint":         &d.checkpoint,
		"cuCheckpointProcessRestore":            &d.restore,
		"cuCheckpointProcessUnlock":             &d.unlock,
	})
	if err != nil {
		return fmt.Errorf("%s: %w: %w", d.path, ErrNoCheckpointAPI, err)
	}
	return nil
}

func (d *Driver) bindSymbols(symbols map[string]any) error {
	var missing []error
	for name, fptr := range symbols {
		sym, err := purego.Dlsym(d.handle, name)
		if err != nil {
			missing = append(missing, fmt.Errorf("symbol %s: %w", name, err))
			continue
		}
		purego.RegisterFunc(fptr, sym)
	}
	return errors.Join(missing...)
}

// Close unloads the library. The Driver must not be used afterwards.
func (d *Driver) Close() error {
	var err error
	d.closeOnce.Do(func() { err = purego.Dlclose(d.handle) })
	return err
}

// Path is the library Open loaded.
func (d *Driver) Path() string { return d.path }

// Version is the CUDA driver API version as cuDriverGetVersion reports it,
// 1000*major + 10*minor (13000 for CUDA 13.0).
func (d *Driver) Version() int { return d.version }

// SupportsDeviceMap tells whether Restore can move state onto other GPUs.
func (d *Driver) SupportsDeviceMap() bool { return d.version >= DeviceMapMinVersion }

// State reports where pid stands in the checkpoint state machine. A process
// that never initialised CUDA gets an Error with ErrorNotInitialized.
func (d *Driver) State(pid int) (ProcessState, error) {
	var s ProcessState
	if rc := d.getState(int32(pid), &s); rc != Success {
		return StateFailed, d.newError("get-state", pid, rc)
	}
	return s, nil
}

// RestoreThreadID is the id of the thread that a restore of pid runs on, for
// checkpointing tools that must leave it alone.
func (d *Driver) RestoreThreadID(pid int) (int, error) {
	var tid int32
	if rc := d.restoreTID(int32(pid), &tid); rc != Success {
		return 0, d.newError("get-restore-tid", pid, rc)
	}
	return int(tid), nil
}

// Lock blocks further CUDA calls in pid and waits for its running work to
// finish. A timeoutMs of 0 waits as long as it takes; a lock that times out
// leaves the process RUNNING.
func (d *Driver) Lock(pid int, timeoutMs uint32) error {
	args := lockArgs{timeoutMs: timeoutMs}
	if rc := d.lock(int32(pid), &args); rc != Success {
		return d.newError("lock", pid, rc)
	}
	return nil
}

// Checkpoint copies a LOCKED process's device memory into its host memory and
// releases its GPUs. It cannot be interrupted.
func (d *Driver) Checkpoint(pid int) error {
	var args checkpointArgs
	if rc := d.checkpoint(int32(pid), &args); rc != Success {
		return d.newError("checkpoint", pid, rc)
	}
	return nil
}

// Restore puts a CHECKPOINTED process's state back on the GPUs, which leaves
// it LOCKED. A non-empty device map sends each old GPU's state to a new GPU
// and must name every GPU the process was using.
func (d *Driver) Restore(pid int, devices gpu.DeviceMap) error {
	var args restoreArgs
	if len(devices) > 0 {
		if !d.SupportsDeviceMap() {
			return fmt.Errorf("restore of pid %d with a device map on driver API %s: %w", pid, FormatVersion(d.version), ErrDeviceMapUnsupported)
		}
		pairs := make([]gpuPair, len(devices))
		for i, p := range devices {
			pairs[i] = gpuPair{oldUUID: p.Old, newUUID: p.New}
		}
		// The driver reads the pairs through a pointer inside args, where
		// the Go runtime cannot see it: pin them for the call.
		var pinner runtime.Pinner
		pinner.Pin(&pairs[0])
		defer pinner.Unpin()
		args.gpuPairs = &pairs[0]
		args.gpuPairsCount = uint32(len(pairs))
	}
	if rc := d.restore(int32(pid), &args); rc != Success {
		return d.newError("restore", pid, rc)
	}
	return nil
}

// Unlock lets a LOCKED process make CUDA calls again.
func (d *Driver) Unlock(pid int) error {
	var args unlockArgs
	if rc := d.unlock(int32(pid), &args); rc != Success {
		return d.newError("unlock", pid, rc)
	}
	return nil
}

func (d *Driver) newError(op string, pid int, rc Result) *Error {
	e := &Error{Op: op, PID: pid, Code: rc, Name: errorNameNotKnown, Message: errorMessageNotKnown}
	var s *byte
	if d.cuGetErrorName != nil && d.cuGetErrorName(rc, &s) == Success {
		e.Name = goString(s)
	}
	if d.cuGetErrorString != nil && d.cuGetErrorString(rc, &s) == Success {
		e.Message = goString(s)
	}
	return e
}

// goString copies a NUL-terminated C string that the driver owns.
func goString(p *byte) string {
	if p == nil {
		return ""
	}
	const limit = 4096 // the driver's strings are short; never run off into memory
	n := 0
	for n < limit && *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// FormatVersion writes a cuDriverGetVersion number as "13.0".
func FormatVersion(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
