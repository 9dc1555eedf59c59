package microvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// Ids of the devices and backends the runtime adds itself.
const (
	serialBusID  = "stasis-vser"
	agentChardev = "stasis-agent"
	agentPortID  = "stasis-agent-port"
	consoleID    = "stasis-console"
)

var reservedIDs = map[string]bool{serialBusID: true, agentChardev: true, agentPortID: true, consoleID: true}

// files are one VM's files in the runtime's state folder.
type files struct{ dir string }

func (f files) state() string    { return filepath.Join(f.dir, "state.json") }
func (f files) pid() string      { return filepath.Join(f.dir, "qemu.pid") }
func (f files) qmp() string      { return filepath.Join(f.dir, "qmp.sock") }
func (f files) qmpQuery() string { return filepath.Join(f.dir, "qmp-query.sock") }
func (f files) agent() string    { return filepath.Join(f.dir, "agent.sock") }

// console is where the guest's console goes when the caller names no file.
func (f files) console() string { return filepath.Join(f.dir, "console.log") }

// maxSocketPath is what a unix socket address holds, less its NUL.
const maxSocketPath = 107

// machineType is the machine every VM gets, and cpuModel the CPU model
// QEMU gives it when no -cpu is given: a snapshot records both.
const (
	machineType = "pc"
	cpuModel    = "qemu64"
)

// launch describes one QEMU process.
type launch struct {
	spec       Spec
	accel      string
	files      files
	consoleLog string
	// devices are the PCI devices it starts with: for a restore, those the
	// VM held when its snapshot was taken.
	devices []Device
	// incoming starts it waiting for a migration stream (a restore).
	incoming bool
}

// args is QEMU's command line. The VM starts paused (-S): Create boots
// nothing, Start or a restore lets it run.
func (l launch) args() []string {
	cmdline := "console=ttyS0 panic=-1 quiet"
	if l.spec.Cmdline != "" {
		cmdline += " " + l.spec.Cmdline
	}
	console := "file,id=" + consoleID + ",append=on,path=" + escape(l.consoleLog)
	args := []string{
		"-machine", machineType + ",accel=" + l.accel,
		"-m", fmt.Sprintf("%dM", l.spec.MemoryBytes>>20),
		"-smp", strconv.Itoa(l.spec.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-S",
		"-daemonize", "-pidfile", l.files.pid(),
		"-kernel", l.spec.Kernel, "-initrd", l.spec.Initrd, "-append", cmdline,
		"-chardev", console, "-serial", "chardev:" + consoleID,
		"-qmp", "unix:" + escape(l.files.qmp()) + ",server=on,wait=off",
		"-qmp", "unix:" + escape(l.files.qmpQuery()) + ",server=on,wait=off",
		"-device", "virtio-serial-pci,id=" + serialBusID,
		"-chardev", "socket,id=" + agentChardev + ",server=on,wait=off,path=" + escape(l.files.agent()),
		"-device", "virtserialport,bus=" + serialBusID + ".0,chardev=" + agentChardev + ",id=" + agentPortID + ",name=" + agent.PortName,
	}
	for _, d := range l.devices {
		args = append(args, "-device", d.option())
	}
	if l.incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// option is the device as a -device value.
func (d Device) option() string {
	parts := []string{escape(d.Driver), "id=" + escape(d.ID)}
	keys := make([]string, 0, len(d.Props))
	for k := range d.Props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, escape(k)+"="+escape(d.Props[k]))
	}
	return strings.Join(parts, ",")
}

// qmpArgs is the device as device_add's arguments.
func (d Device) qmpArgs() map[string]any {
	args := map[string]any{"driver": d.Driver, "id": d.ID}
	for k, v := range d.Props {
		args[k] = v
	}
	return args
}

// escape doubles commas, QEMU's option syntax for a comma in a value.
func escape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// start runs QEMU, which daemonizes once the VM is set up, and returns the
// VM's pid.
func (l launch) start(ctx context.Context, qemu string) (int, error) {
	for _, s := range []string{l.files.qmp(), l.files.qmpQuery(), l.files.agent()} {
		if len(s) > maxSocketPath {
			return 0, fmt.Errorf("socket path %s is %d bytes, more than a unix socket takes (%d): give the runtime a shorter state folder", s, len(s), maxSocketPath)
		}
	}
	cmd := exec.CommandContext(ctx, qemu, l.args()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", filepath.Base(qemu), err, strings.TrimSpace(string(out)))
	}
	data, err := os.ReadFile(l.files.pid())
	if err != nil {
		return 0, fmt.Errorf("QEMU pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("QEMU pid file %s: %q is not a pid", l.files.pid(), data)
	}
	return pid, nil
}

// processStart is the process's start time in clock ticks since boot
// (/proc/PID/stat field 22): with the pid, it tells our QEMU from a later
// process that got the same pid. A process that exited and waits to be
// reaped reads as gone.
func processStart(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it don't.
	rest := string(data)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive says whether the process with pid and start time is still there.
func alive(pid int, start uint64) bool {
	got, err := processStart(pid)
	return err == nil && got == start
}

// kill ends the process and waits until it is gone. QEMU is not our child
// (it daemonized), so the wait is on a pidfd.
func kill(ctx context.Context, pid int, start uint64) error {
	if !alive(pid, start) {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err == unix.ESRCH {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd of QEMU %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !alive(pid, start) { // the pid was reused between the check and the open
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
		return fmt.Errorf("kill QEMU %d: %w", pid, err)
	}
	for {
		timeout := -1
		if d, ok := ctx.Deadline(); ok {
			timeout = max(int(time.Until(d).Milliseconds()), 0)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for QEMU %d: %w", pid, err)
		}
		if n == 0 {
			return fmt.Errorf("QEMU %d did not exit after SIGKILL: %w", pid, ctx.Err())
		}
		return nil
	}
}
