package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime"
)

// Plan is what a Full suspend of an actor needs against what the node has,
// measured before anything is touched.
type Plan struct {
	Actor string                  `json:"actor"`
	Node  fingerprint.Fingerprint `json:"node"`
	// SandboxMemory is the sandbox's resident memory now.
	SandboxMemory uint64 `json:"sandboxMemoryBytes"`
	// GPUs is the device memory the actor's processes hold, per GPU; a GPU
	// suspend moves all of it into the sandbox's host memory.
	GPUs      []gpu.Usage `json:"gpus,omitempty"`
	GPUMemory uint64      `json:"gpuMemoryBytes"`
	// Guest is the VM's guest, for a runtime whose sandboxes are VMs.
	Guest *runtime.Guest `json:"guest,omitempty"`
	// HostMemory is the sandbox's memory once its GPU state is in host
	// memory, which is also the most the image can hold.
	HostMemory uint64 `json:"hostMemoryBytes"`
	// MemoryLimit is the sandbox's memory limit; 0 when it has none.
	MemoryLimit uint64 `json:"memoryLimitBytes,omitempty"`
	// GPUPath is how the GPU state would move (GPU actors), and
	// CUDAProcesses how many CUDA processes the helper found for the
	// runtime path to move.
	GPUPath       GPUPath  `json:"gpuPath,omitempty"`
	CUDAProcesses int      `json:"cudaProcesses,omitempty"`
	DiskFree      uint64   `json:"diskFreeBytes"`
	Checks        []Check  `json:"checks"`
	Warnings      []string `json:"warnings,omitempty"`
}

// Check is one thing a suspend needs, and whether the node has it.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func (p *Plan) check(name string, ok bool, format string, args ...any) {
	p.Checks = append(p.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
}

// Refused says which checks failed and by how much, or nil when none did.
func (p *Plan) Refused() error {
	var failed []string
	for _, c := range p.Checks {
		if !c.OK {
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrRefused, strings.Join(failed, "; "))
}

// Plan measures what suspending the actor into a snapshot under dir would
// need: host memory for its GPU state, inside its memory limit and the
// node's available memory; disk for the image; and for GPU actors the
// helper, the driver's checkpoint API, no MIG and no MPS.
func (e *Engine) Plan(ctx context.Context, a Actor, dir string) (*Plan, error) {
	p := &Plan{Actor: a.Label()}
	var err error
	if p.Node, err = e.Fingerprint(ctx); err != nil {
		return nil, err
	}
	st, err := e.Runtime.State(ctx, a.ID)
	if err != nil {
		return nil, err
	}
	p.check("sandbox", st.Status == runtime.StatusRunning, "the sandbox is %s", st.Status)
	if st.Status != runtime.StatusRunning {
		return p, nil
	}
	if p.SandboxMemory, err = e.Runtime.MemoryUsage(ctx, a.ID); err != nil {
		return nil, err
	}
	if g, ok := e.Runtime.(runtime.GuestReporter); ok {
		guest, err := g.Guest(ctx, a.ID)
		if err != nil {
			return nil, err
		}
		p.Guest = &guest
	}
	if a.GPU {
		path, err := e.gpuPath()
		p.check("gpu-path", err == nil, "%s", okOr(err, fmt.Sprintf("GPU state moves by the %s path", path)))
		p.GPUPath = path
		if err := e.planGPU(ctx, p, a, st.PID); err != nil {
			return nil, err
		}
	}
	p.HostMemory = p.SandboxMemory + p.GPUMemory
	if p.GPUMemory > 0 {
		have := p.Node.Memory.Available
		p.check("host-memory", have >= p.GPUMemory, "the GPU suspend moves %s of device memory into host memory; the node has %s available%s",
			units.Bytes(p.GPUMemory), units.Bytes(have), short(p.GPUMemory, have))
	}
	if p.MemoryLimit, err = memoryLimit(a.Bundle); err != nil {
		return nil, err
	}
	if p.MemoryLimit > 0 {
		p.check("memory-limit", p.HostMemory <= p.MemoryLimit, "the sandbox will hold %s (resident %s + GPU state %s) against its limit of %s%s",
			units.Bytes(p.HostMemory), units.Bytes(p.SandboxMemory), units.Bytes(p.GPUMemory), units.Bytes(p.MemoryLimit), short(p.HostMemory, p.MemoryLimit))
	}
	if p.DiskFree, err = e.freeDisk(existingAncestor(dir)); err != nil {
		return nil, err
	}
	p.check("disk", p.DiskFree >= p.HostMemory, "the image needs up to %s (sandbox memory %s + GPU memory in use %s); %s has %s free%s",
		units.Bytes(p.HostMemory), units.Bytes(p.SandboxMemory), units.Bytes(p.GPUMemory), dir, units.Bytes(p.DiskFree), short(p.HostMemory, p.DiskFree))
	if h, err := node.ReadHugePages(e.hugePagesDir()); err == nil && !h.Sandbox {
		// Not a failure: the suspend and resume work, only slower.
		p.Warnings = append(p.Warnings, h.String())
	}
	return p, nil
}

func (e *Engine) planGPU(ctx context.Context, p *Plan, a Actor, sandboxPID int) error {
	err := e.helperPresent(ctx, a.ID)
	if err == nil && p.GPUPath == GPUPathRuntime {
		// The runtime will run the helper on every CUDA process itself
		// and report nothing: ask the helper now which there are (the
		// host sees one process, the sandbox's, for all of them).
		var rep runtime.GPUReport
		if rep, err = e.runHelper(ctx, a.ID, helper.Status, 0, ""); err == nil {
			p.CUDAProcesses = len(rep.Processes)
		}
	}
	p.check("helper", err == nil, "%s", okOr(err, "stasis-cuda runs inside the sandbox"))
	if !p.Node.GPU.Available {
		p.Warnings = append(p.Warnings, fmt.Sprintf("no GPU facts on this node (%s): GPU memory, MIG and MPS were not checked", p.Node.GPU.Reason))
		return nil
	}
	p.check("checkpoint-api", p.Node.CheckpointAPI.Available, "%s", okOr(errorOf(p.Node.CheckpointAPI.Reason), "the CUDA driver library exports the checkpoint API"))
	procs, err := e.GPU.Processes(ctx)
	if err != nil {
		return fmt.Errorf("GPU processes: %w", err)
	}
	host, err := procfs.List("/proc")
	if err != nil {
		return err
	}
	p.GPUs = gpu.UsageOf(p.Node.GPU, procs, procfs.Tree(host, sandboxPID))
	if len(p.GPUs) == 0 && len(procs) > 0 {
		// The actor's processes should show up under its sandbox; if they
		// do not, size by everything in use, which is never too little.
		p.Warnings = append(p.Warnings, fmt.Sprintf("no GPU process belongs to the sandbox (pid %d); sized by all device memory in use on the node", sandboxPID))
		for _, d := range p.Node.GPU.Devices {
			if d.MemoryUsed > 0 {
				p.GPUs = append(p.GPUs, gpu.Usage{Device: d, MemoryUsed: d.MemoryUsed})
			}
		}
	}
	p.GPUMemory = gpu.TotalUsed(p.GPUs)
	for _, u := range p.GPUs {
		state := "has MIG off"
		if u.Device.MIGEnabled {
			state = "has MIG enabled: Stasis does not suspend actors on MIG instances (the device map names whole GPUs)"
		}
		p.check("mig", !u.Device.MIGEnabled, "GPU %d (%s) %s", u.Device.Index, u.Device.UUID, state)
	}
	mps := procfs.WithCommPrefix(host, "nvidia-cuda-mps")
	p.check("mps", len(mps) == 0, "%s", okOr(mpsError(mps), "no MPS daemon runs"))
	p.Warnings = append(p.Warnings, "managed (UVM) and IPC-shared device memory cannot be seen from outside a process; the driver refuses to checkpoint them, and the suspend then rolls back")
	return nil
}

func mpsError(mps []procfs.Proc) error {
	if len(mps) == 0 {
		return nil
	}
	return fmt.Errorf("an MPS daemon runs (%s, pid %d): Stasis does not suspend MPS clients; stop MPS or run the actor without it", mps[0].Comm, mps[0].PID)
}

func errorOf(reason string) error {
	if reason == "" {
		return nil
	}
	return errors.New(reason)
}

func okOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

func short(need, have uint64) string {
	if have >= need {
		return ""
	}
	return fmt.Sprintf(": %s short", units.Bytes(need-have))
}

// memoryLimit is the memory limit in the actor's OCI spec, 0 when none.
func memoryLimit(bundleDir string) (uint64, error) {
	spec, err := bundle.Load(bundleDir)
	if err != nil {
		return 0, err
	}
	if spec.Linux == nil || spec.Linux.Resources == nil || spec.Linux.Resources.Memory == nil || spec.Linux.Resources.Memory.Limit == nil {
		return 0, nil
	}
	if limit := *spec.Linux.Resources.Memory.Limit; limit > 0 {
		return uint64(limit), nil
	}
	return 0, nil
}

// existingAncestor is dir, or its nearest parent that exists: the folder
// whose filesystem a snapshot written to dir would land on.
func existingAncestor(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			return d
		}
	}
}

// Fingerprint reads this node's facts as a suspend records them and a
// resume checks them: its GPUs (through the engine's GPU source) and the
// engine's runtime.
func (e *Engine) Fingerprint(ctx context.Context) (fingerprint.Fingerprint, error) {
	return node.Collector{GPU: e.GPU, Runtime: e.Runtime.Info(), CheckpointAPI: cuda.CheckpointAPI}.Collect(ctx)
}

func (e *Engine) freeDisk(dir string) (uint64, error) {
	if e.FreeDisk != nil {
		return e.FreeDisk(dir)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// RecommendMemoryLimit is the memory limit a template's sandboxes need so
// that a GPU suspend fits: the actor's own memory, plus per GPU the host
// memory a CUDA process carries before any data (libraries and kernels,
// about 4 GiB measured with PyTorch on an H200) and the whole device memory,
// which a suspend moves into host memory. Lines shows the arithmetic.
func RecommendMemoryLimit(base uint64, gpus int, deviceMemory uint64) (limit uint64, lines []string) {
	const cudaHostOverhead = 4 << 30
	n := uint64(max(gpus, 0))
	limit = base + n*cudaHostOverhead + n*deviceMemory
	limit = (limit + (1<<30 - 1)) &^ (1<<30 - 1)
	lines = []string{
		fmt.Sprintf("actor memory without GPU state      %12s", units.Bytes(base)),
		fmt.Sprintf("+ %d GPU(s) x CUDA host overhead     %12s  (%d x %s)", n, units.Bytes(n*cudaHostOverhead), n, units.Bytes(uint64(cudaHostOverhead))),
		fmt.Sprintf("+ %d GPU(s) x device memory          %12s  (%d x %s)", n, units.Bytes(n*deviceMemory), n, units.Bytes(deviceMemory)),
		fmt.Sprintf("= recommended limit (whole GiB)     %12s", units.Bytes(limit)),
	}
	return limit, lines
}
