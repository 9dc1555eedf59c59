// Package runtime defines what Stasis needs from a sandbox runtime: the OCI
// lifecycle (create, start, exec, pause, stop, delete, state) plus checkpoint
// and restore. runtime/gvisor implements it with runsc, runtime/microvm with
// QEMU. Runtimes whose sandboxes are VMs also implement DeviceHolder and
// GPUAgent.
package runtime

import (
	"context"
	"io"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/gpu"
)

// Status is where a sandbox's container stands, in OCI terms.
type Status string

const (
	StatusCreated Status = "created"
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped"
)

// State is what the runtime reports of one container.
type State struct {
	ID     string `json:"id"`
	Status Status `json:"status"`
	PID    int    `json:"pid"`
	Bundle string `json:"bundle"`
}

// ErrNotFound is returned (wrapped) for a container the runtime does not know.
var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "container not found")

// CreateOptions tune Create.
type CreateOptions struct {
	// ConsoleLog receives the container's standard output and error; empty
	// discards them.
	ConsoleLog string
	// Notify, when set, hears of choices the runtime made for the caller,
	// such as running a GPU sandbox with another driver ABI.
	Notify func(message string)
}

// Process is a command to run inside a running container.
type Process struct {
	Args []string
	Env  []string
	Cwd  string
	// Stdin is read for its standard input as it reads it (a runtime that
	// cannot stream it reads it whole first); nil: none.
	Stdin io.Reader
	// Stdout and Stderr, when set, receive its output as it comes (a
	// runtime that cannot stream gives it in ExecResult instead); each is
	// written from one goroutine at a time.
	Stdout, Stderr io.Writer
	// Terminal, when set, runs it on a pseudo-terminal: its output all
	// comes on Stdout. A runtime without terminals refuses it.
	Terminal *Terminal
}

// Terminal is the pseudo-terminal a process runs on.
type Terminal struct {
	Size WindowSize
	// Resize, when set, gives the terminal's new size each time it
	// changes; the process is told as a terminal tells it (SIGWINCH).
	Resize <-chan WindowSize
}

// WindowSize is a terminal's size in characters.
type WindowSize struct {
	Rows, Cols uint16
}

// ExecResult is how an exec'd process ended.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// CheckpointOptions tune Checkpoint.
type CheckpointOptions struct {
	// ImageDir receives the image. It must be empty or not exist.
	ImageDir string
	// LeaveRunning keeps the container running after the checkpoint, also
	// when the checkpoint fails.
	LeaveRunning bool
	// CUDACheckpointPath, a cuda-checkpoint compatible helper's path
	// inside the sandbox, has the runtime itself checkpoint every CUDA
	// process with it before the save (and put them back on failure, and
	// after the save when LeaveRunning); a Restore of the image then puts
	// them back with it. Needs Capabilities.CUDACheckpoint.
	CUDACheckpointPath string
	// CUDACheckpointSequential runs the helper on one process at a time.
	CUDACheckpointSequential bool
	// Direct writes the image around the page cache (Capabilities.Direct).
	Direct bool
	// ExcludeZeroPages leaves the pages that were committed but are zero
	// out of the image (Capabilities.ExcludeZeroPages).
	ExcludeZeroPages bool
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	ImageDir string
	Bundle   string
	// Background lets the runtime load memory lazily after Restore returns.
	Background bool
	ConsoleLog string
	Notify     func(message string)
	// Env is added to the environment of the bundle's process for this
	// restore only: the restored processes keep theirs, but what the
	// runtime runs in the sandbox on their behalf (the CUDA helper of
	// CheckpointOptions.CUDACheckpointPath) gets it.
	Env []string
	// Direct reads the image around the page cache (Capabilities.Direct).
	Direct bool
}

// Exit is how a container's process ended.
type Exit struct {
	// Status is its exit code: 128+N when signal N ended it, as a shell
	// says it.
	Status int
}

// Signal is the signal that ended the process, 0 when it exited.
func (e Exit) Signal() int {
	if e.Status > 128 {
		return e.Status - 128
	}
	return 0
}

// Waiter is a runtime that says when a container's process ends.
type Waiter interface {
	// Wait blocks until container id's process ends, or ctx does, and
	// says how it ended. A container stopped already may no longer know.
	Wait(ctx context.Context, id string) (Exit, error)
}

// Capabilities are what a runtime's checkpoint and restore can do beyond
// the basics.
type Capabilities struct {
	// CUDACheckpoint: Checkpoint takes CUDACheckpointPath (runsc's
	// --cuda-checkpoint-path), and CUDACheckpointSequential.
	CUDACheckpoint bool `json:"cudaCheckpoint"`
	// Direct: Checkpoint and Restore take Direct.
	Direct bool `json:"direct"`
	// ExcludeZeroPages: Checkpoint takes ExcludeZeroPages.
	ExcludeZeroPages bool `json:"excludeZeroPages"`
	// LazyImage: a Restore with Background reads the image's memory as
	// it goes, in the order the sandbox needs it, so it can start while
	// the image is still arriving (a pull read through a view).
	LazyImage bool `json:"lazyImage"`
	// AppendImage: Checkpoint without Direct writes each image file front
	// to back, each byte once, so that what lies below a file's size while
	// it is being written is final, and a push can read it then.
	AppendImage bool `json:"appendImage"`
}

// Info is what a snapshot records of the runtime it was taken with.
type Info struct {
	// Name identifies the runtime ("gvisor").
	Name string `json:"name"`
	// Version is the runtime's build; a Full snapshot restores only into
	// the same one.
	Version string `json:"version"`
	// Platform is how the runtime runs sandboxes (runsc's --platform).
	Platform string `json:"platform,omitempty"`
	// GPUABI is the NVIDIA driver ABI GPU sandboxes run with: the host
	// driver's own, or the one configured for a runtime that does not know
	// it (runsc's --nvproxy-driver-version); "" without a driver.
	GPUABI string `json:"gpuABI,omitempty"`
}

// Runtime drives sandboxes. Every method takes a context that bounds it;
// container ids are the runtime's own.
type Runtime interface {
	// Info names the runtime and the settings a Full snapshot's restore
	// must match.
	Info() Info
	// Capabilities says which of the options beyond the basics it takes.
	Capabilities() Capabilities
	Create(ctx context.Context, id, bundle string, opts CreateOptions) error
	Start(ctx context.Context, id string) error
	// Exec runs p in the container and waits for it. A non-zero exit is
	// reported in ExecResult, not as an error.
	Exec(ctx context.Context, id string, p Process) (ExecResult, error)
	Checkpoint(ctx context.Context, id string, opts CheckpointOptions) error
	// Restore creates container id from a checkpoint image and starts it.
	Restore(ctx context.Context, id string, opts RestoreOptions) error
	// Pause freezes every process of the container; Unpause lets them run
	// again. Neither touches memory or devices.
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	// Stop kills every process of the container and waits until it stopped.
	Stop(ctx context.Context, id string) error
	// Delete frees the container whatever its state; deleting a container
	// that does not exist succeeds.
	Delete(ctx context.Context, id string) error
	State(ctx context.Context, id string) (State, error)
	// MemoryUsage is the sandbox's resident memory, which a checkpoint image
	// holds at most.
	MemoryUsage(ctx context.Context, id string) (uint64, error)
}

// DeviceHolder is a Runtime whose sandboxes hold devices that a checkpoint
// cannot contain: a micro-VM's passed-through GPU, whose state lives on the
// device. The engine detaches them once the GPU state is in the sandbox's
// memory, before the checkpoint, and attaches them after a restore, before
// the GPU state goes back.
type DeviceHolder interface {
	// DetachDevices removes every hot-pluggable device and waits until the
	// guest has let go of each.
	DetachDevices(ctx context.Context, id string) error
	// AttachDevices adds every device of the sandbox's bundle that it does
	// not hold, and waits until the guest sees each; with none missing it
	// does nothing, so it is safe to run after any failure.
	AttachDevices(ctx context.Context, id string) error
}

// GPUAgent is a Runtime that moves its sandboxes' GPU state itself (a VM's
// guest agent), where the engine would otherwise run the stasis-cuda helper
// through Exec.
type GPUAgent interface {
	// GPUReady says whether the GPU steps can run in the sandbox.
	GPUReady(ctx context.Context, id string) error
	// GPUSuspend suspends every CUDA process of the sandbox, all or none.
	GPUSuspend(ctx context.Context, id string, lockTimeout time.Duration) (GPUReport, error)
	// GPUResume resumes every locked or checkpointed CUDA process, onto
	// other GPUs by devices when it is not empty.
	GPUResume(ctx context.Context, id string, devices gpu.DeviceMap) (GPUReport, error)
}

// PauseCommander is a Runtime whose sandboxes another program can pause
// with a command line, without the process that drives them: a fleet agent
// fences the sandboxes of a node whose stasisd does not answer with it.
type PauseCommander interface {
	// PauseCommand is the command line (program first) that pauses
	// sandbox id.
	PauseCommand(id string) []string
}

// IDChecker is a Runtime that cannot use every id for a new container
// beside the containers it has.
type IDChecker interface {
	// CheckNewID says why id cannot be given to a new container, nil
	// where it can.
	CheckNewID(id string) error
}

// FileHolder is a Runtime whose restore opens again, one after another,
// the files of the container's root file system and mounts that its
// sandbox held, and whose own code is read from the disk as it restores:
// on a disk that a pull keeps busy, each of those small reads waits
// behind the pull's. The engine records the files at a suspend and reads
// their metadata, and the runtime's code, into the page cache before a
// restore.
type FileHolder interface {
	// OpenFiles lists the paths, inside container id, of the files of its
	// root file system and mounts that its sandbox holds open.
	OpenFiles(ctx context.Context, id string) ([]string, error)
	// Prefetch starts reading the runtime's own binary into the page
	// cache.
	Prefetch() error
}

// GPUReport is what a GPU step did inside a sandbox: the part of
// stasis-cuda's --json report (cuda/group.Report) that the engine reads,
// decoded from the same JSON.
type GPUReport struct {
	Op string `json:"op"`
	// DriverVersion is the CUDA driver API version, such as 13000.
	DriverVersion int `json:"driverVersion"`
	// Processes are the CUDA processes found, as they stood before the
	// step (after it, for a status).
	Processes []GPUProcess `json:"processes,omitempty"`
	Outcomes  []GPUOutcome `json:"outcomes,omitempty"`
	Error     string       `json:"error,omitempty"`
	// Skipped says why nothing was done, when a micro-VM's guest agent
	// finds no NVIDIA device in the guest.
	Skipped string `json:"skipped,omitempty"`
}

// GPUProcess is one CUDA process and its checkpoint state: running,
// locked, checkpointed or failed.
type GPUProcess struct {
	PID   int    `json:"pid"`
	State string `json:"state"`
}

// GPUOutcome is what a GPU step did to one CUDA process.
type GPUOutcome struct {
	PID int    `json:"pid"`
	Err string `json:"error,omitempty"`
	// Duration is how long the driver's calls for this process took, as
	// the helper timed them.
	Duration time.Duration `json:"durationNs,omitempty"`
}

// Guest is what a VM snapshot records of its guest: what comes back with
// the snapshot (the guest's kernel and NVIDIA driver) and what a host must
// give it again (the VMM build, accelerator, machine, CPU model, memory).
type Guest struct {
	// VMM is the virtual machine monitor's build ("QEMU emulator version
	// 7.2.x"), Accelerator how it ran the guest (kvm or tcg).
	VMM         string `json:"vmm"`
	Accelerator string `json:"accelerator"`
	// Machine is the machine type ("pc") and CPUModel the CPU model the
	// guest was given ("qemu64").
	Machine  string `json:"machine"`
	CPUModel string `json:"cpuModel"`
	CPUs     int    `json:"cpus"`
	// MemoryBytes is the guest's memory, which a restore allocates.
	MemoryBytes uint64 `json:"memoryBytes"`
	// Kernel is the guest kernel's release, NVIDIADriver its NVIDIA driver
	// ("" without one).
	Kernel       string `json:"kernel"`
	NVIDIADriver string `json:"nvidiaDriver,omitempty"`
}

// GuestReporter is a Runtime whose sandboxes are VMs: a suspend records
// their guest in the snapshot.
type GuestReporter interface {
	Guest(ctx context.Context, id string) (Guest, error)
}
