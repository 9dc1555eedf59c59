// Package group finds the CUDA processes of a pid namespace and moves them
// through the driver's checkpoint state machine together: a suspend or a
// resume either reaches every process or is undone for all of them.
package group

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/gpu"
)

// Driver is the part of *cuda.Driver the group operations use.
type Driver interface {
	State(pid int) (cuda.ProcessState, error)
	Lock(pid int, timeoutMs uint32) error
	Checkpoint(pid int) error
	Restore(pid int, devices gpu.DeviceMap) error
	Unlock(pid int) error
}

// Process is a process the driver knows as a CUDA process.
type Process struct {
	PID     int               `json:"pid"`
	Command string            `json:"command"`
	State   cuda.ProcessState `json:"state"`
	// HoldsDevice is true while the process has an NVIDIA device file open.
	// A checkpointed process has closed them all.
	HoldsDevice bool `json:"holdsDevice"`
}

// Scanner lists the CUDA processes visible in a procfs.
type Scanner struct {
	Driver Driver
	// ProcRoot is the procfs to read; "/proc" when empty.
	ProcRoot string
	// Exclude are pids never to report, such as the caller itself, which
	// holds the device files open once it has initialised CUDA.
	Exclude []int
}

// scanWorkers bounds the driver queries in flight; each is a quick ioctl.
const scanWorkers = 8

// Scan asks the driver for the state of every process in the procfs and
// returns those that answer, in pid order. A process that does not answer
// never initialised CUDA; that includes processes that only use NVML, which
// hold the device files open but cannot be checkpointed. Every pid is asked,
// not only those holding device files, because a checkpointed process has
// closed them.
func (s Scanner) Scan() ([]Process, error) {
	root := s.ProcRoot
	if root == "" {
		root = "/proc"
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", root, err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || slices.Contains(s.Exclude, pid) {
			continue
		}
		pids = append(pids, pid)
	}

	found := make([]*Process, len(pids))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(scanWorkers, len(pids)) {
		wg.Go(func() {
			for i := range next {
				state, err := s.Driver.State(pids[i])
				if err != nil {
					continue
				}
				dir := filepath.Join(root, strconv.Itoa(pids[i]))
				found[i] = &Process{PID: pids[i], State: state, Command: command(dir), HoldsDevice: holdsNvidiaDevice(dir)}
			}
		})
	}
	for i := range pids {
		next <- i
	}
	close(next)
	wg.Wait()

	var procs []Process
	for _, p := range found {
		if p != nil {
			procs = append(procs, *p)
		}
	}
	return procs, nil
}

// ToSuspend picks the processes a suspend acts on: every CUDA process that
// holds a GPU, and those already part-way through a checkpoint.
func ToSuspend(procs []Process) []Process {
	return slices.DeleteFunc(slices.Clone(procs), func(p Process) bool {
		return p.State == cuda.StateFailed || (p.State == cuda.StateRunning && !p.HoldsDevice)
	})
}

// ToResume picks the processes a resume acts on: the locked and checkpointed.
func ToResume(procs []Process) []Process {
	return slices.DeleteFunc(slices.Clone(procs), func(p Process) bool {
		return p.State != cuda.StateLocked && p.State != cuda.StateCheckpointed
	})
}

func holdsNvidiaDevice(procDir string) bool {
	fds, err := os.ReadDir(filepath.Join(procDir, "fd"))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(procDir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "/dev/nvidia") {
			return true
		}
	}
	return false
}

func command(procDir string) string {
	b, err := os.ReadFile(filepath.Join(procDir, "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
