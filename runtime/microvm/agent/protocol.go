// Package agent is the Stasis guest agent of micro-VM actors and its
// client. The agent runs inside the guest (cmd/stasis-agent); the host's
// micro-VM runtime reaches it over a virtio-serial port or vsock and asks it
// to start the workload, run commands, report facts, and move the guest's
// CUDA processes' state between the GPU and guest memory with the same
// group operations as stasis-cuda.
//
// The protocol is one JSON object per line each way: a Request carries an
// id, and the Reply to it carries the same id. The agent serves one request
// at a time per connection; a client skips replies whose id is not its
// request's, which a client cut off before reading its reply leaves behind
// on a serial port.
package agent

import (
	"encoding/json"
	"time"
)

// PortName is the virtio-serial port the agent listens on; the host names
// the port so, and the guest finds it by that name in sysfs.
const PortName = "org.stasis.agent"

// Ops a Request can name.
const (
	OpPing       = "ping"
	OpFacts      = "facts"
	OpStart      = "start"
	OpExec       = "exec"
	OpGPUStatus  = "gpu-status"
	OpGPUSuspend = "gpu-suspend"
	OpGPUResume  = "gpu-resume"
	// OpWorkload asks where the workload stands, and nothing else: cheap
	// enough to ask every second.
	OpWorkload = "workload"
)

// Request is one call to the agent.
type Request struct {
	ID uint64 `json:"id"`
	Op string `json:"op"`
	// Process is the workload to start (OpStart) or the command to run
	// (OpExec).
	Process *Process `json:"process,omitempty"`
	// LockTimeout bounds OpGPUSuspend's wait for running GPU work.
	LockTimeout time.Duration `json:"lockTimeoutNs,omitempty"`
	// DeviceMap sends OpGPUResume's state to other GPUs (OLD=NEW,...).
	DeviceMap string `json:"deviceMap,omitempty"`
}

// MaxStdin bounds a Process's standard input: the request's line holds it
// whole, base64-encoded, within the agent's bound on a line.
const MaxStdin = 512 << 10

// Process is a command in the guest.
type Process struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	// Stdin is its standard input, whole (an agent older than it runs the
	// process without).
	Stdin []byte `json:"stdin,omitempty"`
}

// Reply answers one Request. Error set means the request failed; the other
// fields say what was done before it did.
type Reply struct {
	ID    uint64      `json:"id"`
	Error string      `json:"error,omitempty"`
	Facts *Facts      `json:"facts,omitempty"`
	Exec  *ExecResult `json:"exec,omitempty"`
	// Report is stasis-cuda's JSON report of a GPU step, as it printed it.
	Report json.RawMessage `json:"report,omitempty"`
	// Skipped says why a GPU step had nothing to do (no NVIDIA device in
	// the guest).
	Skipped string `json:"skipped,omitempty"`
	// PID is the started workload's pid.
	PID int `json:"pid,omitempty"`
	// Workload answers OpWorkload.
	Workload *Workload `json:"workload,omitempty"`
}

// ExecResult is how an OpExec command ended.
type ExecResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
}

// Facts is what the guest reports of itself.
type Facts struct {
	Kernel string `json:"kernel"`
	// MemTotal and MemFree are the guest's /proc/meminfo figures in bytes.
	// Memory in use (MemTotal - MemFree) is what a VM snapshot holds beyond
	// zero pages, and free memory is where a GPU suspend puts device state.
	MemTotal uint64 `json:"memTotalBytes"`
	MemFree  uint64 `json:"memFreeBytes"`
	// NVIDIADriver is the guest's NVIDIA kernel driver version, empty when
	// none is loaded.
	NVIDIADriver string `json:"nvidiaDriver,omitempty"`
	// PCIDevices lists the guest's PCI devices as VENDOR:DEVICE@SLOT.
	PCIDevices []string `json:"pciDevices"`
	Workload   Workload `json:"workload"`
}

// Workload is where the started workload stands.
type Workload struct {
	PID     int  `json:"pid,omitempty"`
	Running bool `json:"running"`
	// ExitCode is its exit code once it ended; -1 when a signal ended it,
	// then Signal is that signal.
	ExitCode int    `json:"exitCode,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
}
