// Package microvm runs actors as micro-VMs with QEMU: the guest boots a
// kernel and an initramfs whose /init is the Stasis guest agent
// (runtime/microvm/agent), which starts the workload and runs commands and
// GPU steps for the host. A checkpoint is QEMU's migration stream written to
// a file while the VM is paused; a restore starts a new QEMU that reads it.
// Passed-through devices (the GPU) cannot be in a migration stream, so the
// runtime is a runtime.DeviceHolder: the engine detaches them before the
// checkpoint and attaches them after the restore, and a runtime.GPUAgent:
// the guest agent moves the GPU state into guest memory first.
package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// Config sets up a Runtime.
type Config struct {
	// Root holds each VM's state folder (sockets, pid file, state). Unix
	// socket paths are short, so keep it short (under about 80 bytes).
	Root string
	// QEMU is the qemu-system-x86_64 binary; found on PATH when empty.
	QEMU string
	// Accel is QEMU's accelerator, "kvm" or "tcg". When empty, "kvm" if
	// /dev/kvm runs a 64-bit test guest and, given ProbeKernel, boots that
	// kernel; "tcg" otherwise, with the reason in AccelReason. That probe
	// runs in the background from New; the first call that needs the
	// accelerator waits for it.
	Accel string
	// ProbeKernel is a guest kernel the choice of accelerator boots once
	// under KVM, to catch hosts whose KVM runs a test guest but not a
	// kernel.
	ProbeKernel string
	// BootTimeout bounds how long Start waits for the guest agent; 2
	// minutes when zero.
	BootTimeout time.Duration
	// SilentBoot is how long Start waits for the guest's first console
	// output before it gives up on a guest that does not run; 20 s when
	// zero.
	SilentBoot time.Duration
	// DeviceTimeout bounds each device detach and attach; 1 minute when
	// zero.
	DeviceTimeout time.Duration
}

func (c Config) silentBoot() time.Duration {
	if c.SilentBoot > 0 {
		return c.SilentBoot
	}
	return 20 * time.Second
}

// Runtime runs micro-VMs with QEMU.
type Runtime struct {
	cfg     Config
	qemu    string
	version string
	// chosen is closed once the accelerator is chosen (New probes KVM in
	// the background, so that a program starting up does not wait for a
	// guest kernel's boot); accel is it, and accelReason says why.
	chosen      chan struct{}
	accel       string
	accelReason string
}

var _ interface {
	runtime.Runtime
	runtime.DeviceHolder
	runtime.GPUAgent
	runtime.GuestReporter
} = (*Runtime)(nil)

// New checks the QEMU binary and the state folder.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Root == "" {
		return nil, errors.New("microvm: no state folder (Config.Root) given")
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("microvm: state folder: %w", err)
	}
	bin := cfg.QEMU
	if bin == "" {
		bin = "qemu-system-x86_64"
	}
	qemu, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("microvm: %w (install QEMU: scripts/install-microvm.sh)", err)
	}
	out, err := exec.CommandContext(ctx, qemu, "-version").Output()
	if err != nil {
		return nil, fmt.Errorf("microvm: %s -version: %w", qemu, err)
	}
	version, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = 2 * time.Minute
	}
	if cfg.DeviceTimeout <= 0 {
		cfg.DeviceTimeout = time.Minute
	}
	r := &Runtime{cfg: cfg, qemu: qemu, version: version, chosen: make(chan struct{}), accel: cfg.Accel, accelReason: "configured"}
	if cfg.Accel != "" {
		close(r.chosen)
		return r, nil
	}
	go func() {
		defer close(r.chosen)
		r.accel, r.accelReason = chooseAccel(context.WithoutCancel(ctx), qemu, cfg.ProbeKernel)
	}()
	return r, nil
}

// accelerator is QEMU's accelerator for every VM, once chosen.
func (r *Runtime) accelerator() string {
	<-r.chosen
	return r.accel
}

// probeTimeout bounds each KVM probe; a kernel under KVM prints its first
// line in well under a second.
const probeTimeout = 5 * time.Second

// chooseAccel picks KVM when it really runs guests here, TCG otherwise,
// and says why.
func chooseAccel(ctx context.Context, qemu, kernel string) (accel, reason string) {
	if err := probeKVM(probeTimeout); err != nil {
		return "tcg", fmt.Sprintf("KVM is not used: %v; guests run under TCG (software, slower)", err)
	}
	if kernel == "" {
		return "kvm", "/dev/kvm runs a 64-bit test guest"
	}
	if err := probeBoot(ctx, qemu, kernel, probeTimeout); err != nil {
		return "tcg", fmt.Sprintf("KVM is not used: /dev/kvm opens, but %v; guests run under TCG (software, slower)", err)
	}
	return "kvm", "/dev/kvm boots " + kernel
}

// AccelReason says why the runtime runs guests with its accelerator.
func (r *Runtime) AccelReason() string {
	accel := r.accelerator()
	return accel + ": " + r.accelReason
}

// vhostVsock is the host device a vsock channel to a guest needs.
const vhostVsock = "/dev/vhost-vsock"

// AgentChannel says how the host reaches the guest agent here, and why.
func (r *Runtime) AgentChannel() string {
	if _, err := os.Stat(vhostVsock); err != nil {
		return "virtio-serial port " + agent.PortName + " (no " + vhostVsock + " on this host for vsock)"
	}
	return "virtio-serial port " + agent.PortName + " (" + vhostVsock + " is here, but the agent does not speak vsock yet)"
}

// Notes say what the runtime chose on this node and why: the accelerator
// and the guest agent's channel.
func (r *Runtime) Notes() []string {
	return []string{"accelerator " + r.AccelReason(), "guest agent over " + r.AgentChannel()}
}

// Info names QEMU's build and accelerator: a snapshot restores only into
// the same QEMU (its migration format is not stable across versions).
// Capabilities: QEMU's migration stream has none of the checkpoint options
// beyond the basics; the guest agent moves GPU state (runtime.GPUAgent).
func (r *Runtime) Capabilities() runtime.Capabilities { return runtime.Capabilities{} }

func (r *Runtime) Info() runtime.Info {
	return runtime.Info{Name: "qemu-microvm", Version: r.version, Platform: r.accelerator()}
}

// vmState is what the runtime keeps of one VM between calls.
type vmState struct {
	ID     string `json:"id"`
	Bundle string `json:"bundle"`
	PID    int    `json:"pid"`
	// Start is the QEMU process's start time, which tells it from a later
	// process with the same pid.
	Start uint64 `json:"start"`
	Spec  Spec   `json:"spec"`
	// Console is the file the guest's console goes to.
	Console string `json:"console"`
}

func (r *Runtime) files(id string) files { return files{dir: filepath.Join(r.cfg.Root, id)} }

func (r *Runtime) load(id string) (*vmState, error) {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("microvm: bad VM id %q", id)
	}
	data, err := os.ReadFile(r.files(id).state())
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("VM %s: %w", id, runtime.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("VM %s: %w", id, err)
	}
	var st vmState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("VM %s: state file %s: %w", id, r.files(id).state(), err)
	}
	return &st, nil
}

func (r *Runtime) save(st *vmState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteAtomic(r.files(st.ID).state(), strings.NewReader(string(data)), int64(len(data)))
}

// boot launches QEMU for a new VM id and records it; on failure nothing of
// the VM is left.
func (r *Runtime) boot(ctx context.Context, id, bundleDir string, l launch) (err error) {
	if _, err := r.load(id); err == nil {
		return fmt.Errorf("VM %s already exists", id)
	} else if !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	f := r.files(id)
	if err := os.Mkdir(f.dir, 0o700); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(f.dir)
		}
	}()
	l.accel, l.files = r.accelerator(), f
	if l.consoleLog == "" {
		l.consoleLog = f.console()
	}
	pid, err := l.start(ctx, r.qemu)
	if err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	st := &vmState{ID: id, Bundle: bundleDir, PID: pid, Spec: l.spec, Console: l.consoleLog}
	if st.Start, err = processStart(pid); err != nil {
		return fmt.Errorf("VM %s: QEMU %d: %w", id, pid, err)
	}
	defer func() {
		if err != nil {
			_ = kill(context.WithoutCancel(ctx), st.PID, st.Start)
		}
	}()
	return r.save(st)
}

// Create starts QEMU with the VM paused before its first instruction.
func (r *Runtime) Create(ctx context.Context, id, bundleDir string, opts runtime.CreateOptions) error {
	spec, err := LoadSpec(bundleDir)
	if err != nil {
		return err
	}
	return r.boot(ctx, id, bundleDir, launch{spec: spec, consoleLog: opts.ConsoleLog, devices: spec.Devices})
}

// Start boots the guest, waits for its agent to open its port, and has it
// start the workload.
func (r *Runtime) Start(ctx context.Context, id string) error {
	return r.talk(ctx, id, true, func(ctx context.Context) error { return r.start(ctx, id) })
}

func (r *Runtime) start(ctx context.Context, id string) error {
	st, q, err := r.session(ctx, id)
	if err != nil {
		return err
	}
	defer q.close()
	if err := q.execute(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	bctx, cancel := context.WithTimeout(ctx, r.cfg.BootTimeout)
	defer cancel()
	wctx, giveUp := context.WithCancelCause(bctx)
	defer giveUp(nil)
	go r.watchBoot(wctx, st.Console, giveUp)
	_, err = q.waitEvent(wctx, func(ev qmpEvent) bool {
		var d struct {
			ID   string `json:"id"`
			Open bool   `json:"open"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		return ev.Event == "VSERPORT_CHANGE" && d.ID == agentPortID && d.Open
	})
	if cause := context.Cause(wctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("VM %s: %w", id, cause)
	}
	if err != nil {
		tail := consoleTail(st.Console)
		if f := bootFailure(tail); f != "" {
			// QEMU exits as the kernel panics, often before a look.
			return fmt.Errorf("VM %s: %w", id, gaveUp(f, st.Console, tail))
		}
		return fmt.Errorf("VM %s: the guest agent did not open its port %s within %s of boot (%w): the initramfs's /init must be stasis-agent, and the kernel needs virtio_pci and virtio_console; the console log %s shows how far the guest got; its last lines:\n%s",
			id, agent.PortName, r.cfg.BootTimeout, err, st.Console, tail)
	}
	if _, err := r.call(ctx, id, agent.Request{Op: agent.OpStart, Process: &st.Spec.Process}); err != nil {
		return fmt.Errorf("VM %s: start the workload: %w", id, err)
	}
	return nil
}

// bootFailures are what a guest kernel says on its console when it gives
// up at boot: the agent will never answer.
var bootFailures = []string{"Kernel panic - not syncing", "No working init found", "Failed to execute ", "Attempted to kill init"}

// agentMark begins each line stasis-agent prints on the console; the
// first, "stasis-agent: up as /init", as it starts.
const agentMark = "stasis-agent:"

// agentStart bounds how long a started agent takes to open its port: a
// static program's start, well under a second even under TCG.
const agentStart = 30 * time.Second

// watchBoot gives up on a booting guest (giveUp, with why) once its
// console says its kernel gave up; when it stays empty for SilentBoot (its
// kernel never ran /init, which says so on the console at once); when it
// prints for three times SilentBoot without a word from stasis-agent (its
// /init is something else; a kernel under TCG on a loaded host may print
// warnings for a while before it runs /init); and when the agent said it
// started but did not open its port within agentStart: each at its own
// bound, not at the boot timeout. It returns when ctx ends.
func (r *Runtime) watchBoot(ctx context.Context, console string, giveUp context.CancelCauseFunc) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	silent := r.cfg.silentBoot()
	silentUntil := time.Now().Add(silent)
	var printedAt, agentAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		tail := consoleTail(console)
		if bootFailure(tail) != "" {
			giveUp(gaveUp(bootFailure(tail), console, tail))
			return
		}
		info, err := os.Stat(console)
		switch {
		case err != nil:
		case info.Size() == 0 && now.After(silentUntil):
			giveUp(fmt.Errorf("the guest printed nothing on its console (%s) within %s of boot: its kernel never ran /init; with the %s accelerator this host may not run guests (try Accel tcg)", console, silent, r.accelerator()))
			return
		case info.Size() > 0 && printedAt.IsZero():
			printedAt = now
		}
		if agentAt.IsZero() && !printedAt.IsZero() {
			if lines, _ := fsutil.LastLines(console, 400, 64<<10); strings.Contains(strings.Join(lines, "\n"), agentMark) {
				agentAt = now
			}
		}
		switch {
		case agentAt.IsZero() && !printedAt.IsZero() && now.Sub(printedAt) > 3*silent:
			giveUp(fmt.Errorf("the guest printed on its console (%s) for %s without a word from stasis-agent: its initramfs's /init is not stasis-agent (make one with 'stasis-agent initramfs'); its last lines:\n%s", console, 3*silent, tail))
			return
		case !agentAt.IsZero() && now.Sub(agentAt) > agentStart:
			giveUp(fmt.Errorf("the guest's stasis-agent started but did not open its port %s within %s: the kernel needs virtio_pci and virtio_console (built in or loaded by the agent); the console (%s) says how far it got; its last lines:\n%s", agent.PortName, agentStart, console, tail))
			return
		}
	}
}

// bootFailure is the first of bootFailures in a console's tail ("": none).
func bootFailure(tail string) string {
	for _, f := range bootFailures {
		if strings.Contains(tail, f) {
			return f
		}
	}
	return ""
}

func gaveUp(failure, console, tail string) error {
	return fmt.Errorf("the guest's kernel gave up at boot (%q on its console %s); its last lines:\n%s", failure, console, tail)
}

// consoleTail is the last lines of a guest's console: 20, as a panic's
// message stands above its call trace.
func consoleTail(path string) string {
	lines, _ := fsutil.LastLines(path, 20, 4<<10)
	return strings.Join(lines, "\n")
}

// agentTimeout bounds an agent call that has no deadline of its own.
const agentTimeout = 2 * time.Minute

// call sends one request to the VM's guest agent.
func (r *Runtime) call(ctx context.Context, id string, req agent.Request) (agent.Reply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, agentTimeout)
		defer cancel()
	}
	var reply agent.Reply
	err := r.talk(ctx, id, !longRequests[req.Op], func(ctx context.Context) error {
		c, err := agent.Dial(ctx, r.files(id).agent())
		if err != nil {
			return err
		}
		defer c.Close()
		reply, err = c.Call(ctx, req)
		return err
	})
	return reply, err
}

// Exec runs p in the guest through the agent.
func (r *Runtime) Exec(ctx context.Context, id string, p runtime.Process) (runtime.ExecResult, error) {
	if _, err := r.load(id); err != nil {
		return runtime.ExecResult{}, err
	}
	if p.Terminal != nil {
		return runtime.ExecResult{}, errdefs.Mark(fmt.Errorf("VM %s: a micro-VM guest runs commands without a terminal: exec without -t", id), errdefs.ErrFailedPrecondition)
	}
	stdin, err := wholeStdin(p.Stdin)
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("VM %s: %w", id, err)
	}
	rep, err := r.call(ctx, id, agent.Request{Op: agent.OpExec, Process: &agent.Process{Args: p.Args, Env: p.Env, Cwd: p.Cwd, Stdin: stdin}})
	if err != nil {
		return runtime.ExecResult{}, fmt.Errorf("VM %s: %w", id, err)
	}
	return runtime.ExecResult{ExitCode: rep.Exec.ExitCode, Stdout: rep.Exec.Stdout, Stderr: rep.Exec.Stderr}, nil
}

// wholeStdin reads an exec's standard input whole, as the guest agent
// takes it: at most agent.MaxStdin bytes.
func wholeStdin(in io.Reader) ([]byte, error) {
	if in == nil {
		return nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(in, agent.MaxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read the exec's standard input: %w", err)
	}
	if len(data) > agent.MaxStdin {
		return nil, errdefs.Mark(fmt.Errorf("a micro-VM guest takes an exec's standard input whole, at most %d KiB; copy larger input through a durable folder", agent.MaxStdin>>10), errdefs.ErrInvalidArgument)
	}
	return data, nil
}

// Facts is what the guest agent reports of the guest.
func (r *Runtime) Facts(ctx context.Context, id string) (*agent.Facts, error) {
	rep, err := r.call(ctx, id, agent.Request{Op: agent.OpFacts})
	if err != nil {
		return nil, fmt.Errorf("VM %s: %w", id, err)
	}
	return rep.Facts, nil
}

// Guest is what a snapshot of VM id records of it: QEMU's build and
// accelerator, the machine, and what the agent reports of the guest.
func (r *Runtime) Guest(ctx context.Context, id string) (runtime.Guest, error) {
	st, err := r.load(id)
	if err != nil {
		return runtime.Guest{}, err
	}
	f, err := r.Facts(ctx, id)
	if err != nil {
		return runtime.Guest{}, err
	}
	return runtime.Guest{VMM: r.version, Accelerator: r.accelerator(), Machine: machineType, CPUModel: cpuModel, CPUs: st.Spec.CPUs,
		MemoryBytes: st.Spec.MemoryBytes, Kernel: f.Kernel, NVIDIADriver: f.NVIDIADriver}, nil
}

// MemoryUsage is the guest's memory in use: what a snapshot holds besides
// zero pages. Free guest memory is where a GPU suspend puts device state,
// and the bundle's memory limit is the guest's whole memory, so the
// engine's plan checks in-use plus GPU memory against it.
func (r *Runtime) MemoryUsage(ctx context.Context, id string) (uint64, error) {
	f, err := r.Facts(ctx, id)
	if err != nil {
		return 0, err
	}
	return f.MemTotal - f.MemFree, nil
}

// session loads the VM's state and opens its command monitor.
func (r *Runtime) session(ctx context.Context, id string) (*vmState, *qmp, error) {
	st, err := r.load(id)
	if err != nil {
		return nil, nil, err
	}
	q, err := dialQMP(ctx, r.files(id).qmp())
	if err != nil {
		return nil, nil, fmt.Errorf("VM %s: %w", id, err)
	}
	return st, q, nil
}

func (r *Runtime) qmpCommand(ctx context.Context, id, command string) error {
	return r.talk(ctx, id, true, func(ctx context.Context) error {
		_, q, err := r.session(ctx, id)
		if err != nil {
			return err
		}
		defer q.close()
		if err := q.execute(ctx, command, nil, nil); err != nil {
			return fmt.Errorf("VM %s: %w", id, err)
		}
		return nil
	})
}

// Pause stops the VM's CPUs.
func (r *Runtime) Pause(ctx context.Context, id string) error { return r.qmpCommand(ctx, id, "stop") }

// Resume lets a paused VM's CPUs run again.
func (r *Runtime) Unpause(ctx context.Context, id string) error { return r.qmpCommand(ctx, id, "cont") }

// Stop kills QEMU and waits until it is gone.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	st, err := r.load(id)
	if err != nil {
		return err
	}
	if err := kill(ctx, st.PID, st.Start); err != nil {
		return fmt.Errorf("VM %s: %w", id, err)
	}
	return nil
}

// Delete kills QEMU if it runs and removes the VM's state folder, also one
// that a crash left without a state file.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := r.Stop(ctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	return os.RemoveAll(r.files(id).dir)
}

// State reads the VM's run state from QEMU, on a monitor of its own so that
// it answers while a long command (a migration) holds the other.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	st, err := r.load(id)
	if err != nil {
		return runtime.State{}, err
	}
	s := runtime.State{ID: id, PID: st.PID, Bundle: st.Bundle, Status: runtime.StatusStopped}
	if !alive(st.PID, st.Start) {
		return s, nil
	}
	err = r.talk(ctx, id, true, func(ctx context.Context) error {
		q, err := dialQMP(ctx, r.files(id).qmpQuery())
		if err != nil {
			if !alive(st.PID, st.Start) {
				return nil
			}
			return fmt.Errorf("VM %s: %w", id, err)
		}
		defer q.close()
		var status struct {
			Status string `json:"status"`
		}
		if err := q.execute(ctx, "query-status", nil, &status); err != nil {
			return fmt.Errorf("VM %s: %w", id, err)
		}
		s.Status = runStatus(status.Status)
		return nil
	})
	return s, err
}

// runStatus maps QEMU's run states onto the OCI ones.
func runStatus(qemu string) runtime.Status {
	switch qemu {
	case "running":
		return runtime.StatusRunning
	case "prelaunch", "inmigrate":
		return runtime.StatusCreated
	case "shutdown", "guest-panicked", "internal-error", "io-error":
		return runtime.StatusStopped
	}
	// paused, postmigrate, finish-migrate, save-vm, restore-vm, suspended...
	return runtime.StatusPaused
}
