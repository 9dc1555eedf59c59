package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// guest lays out the /proc and /sys files the agent reads.
func guest(t *testing.T) string {
	root := t.TempDir()
	write(t, filepath.Join(root, "proc/sys/kernel/osrelease"), "6.1.0-50-cloud-amd64\n", 0o644)
	write(t, filepath.Join(root, "proc/meminfo"), "MemTotal:         223636 kB\nMemFree:          189904 kB\nMemAvailable:     190000 kB\n", 0o644)
	write(t, filepath.Join(root, "sys/bus/pci/devices/0000:00:03.0/vendor"), "0x1af4\n", 0o644)
	write(t, filepath.Join(root, "sys/bus/pci/devices/0000:00:03.0/device"), "0x1005\n", 0o644)
	write(t, filepath.Join(root, "sys/module/nvidia/version"), "580.159.04\n", 0o644)
	return root
}

// helperScript is a stand-in stasis-cuda: it records its arguments, prints
// a report, and fails when the file fail exists beside it.
func helperScript(t *testing.T, dir string) string {
	path := filepath.Join(dir, "stasis-cuda")
	write(t, path, `#!/bin/sh
echo "$@" >>"$(dirname "$0")/calls"
if [ -e "$(dirname "$0")/fail" ]; then
	echo '{"op":"'"$1"'","driverVersion":13000,"error":"pid 7: injected"}'
	exit 1
fi
echo '{"op":"'"$1"'","driverVersion":13000,"outcomes":[{"pid":7,"before":"running","after":"checkpointed"}]}'
`, 0o755)
	return path
}

func TestFactsReadTheGuest(t *testing.T) {
	s := &agent.Server{Root: guest(t)}
	rep := s.Handle(context.Background(), agent.Request{ID: 9, Op: agent.OpFacts})
	if rep.Error != "" || rep.ID != 9 {
		t.Fatalf("reply %+v", rep)
	}
	f := rep.Facts
	if f.Kernel != "6.1.0-50-cloud-amd64" || f.MemTotal != 223636<<10 || f.MemFree != 189904<<10 || f.NVIDIADriver != "580.159.04" ||
		len(f.PCIDevices) != 1 || f.PCIDevices[0] != "1af4:1005@0000:00:03.0" {
		t.Fatalf("facts %+v", f)
	}
}

func TestGPUStepsRunTheHelper(t *testing.T) {
	root := guest(t)
	bin := t.TempDir()
	s := &agent.Server{Root: root, NVIDIADevice: "/dev/nvidiactl", Helper: helperScript(t, bin)}
	ctx := context.Background()

	// No NVIDIA device in the guest: nothing to do, said so.
	rep := s.Handle(ctx, agent.Request{Op: agent.OpGPUSuspend})
	if rep.Error != "" || !strings.Contains(rep.Skipped, "no NVIDIA device (/dev/nvidiactl absent)") {
		t.Fatalf("without a device: %+v", rep)
	}

	write(t, filepath.Join(root, "dev/nvidiactl"), "", 0o644)
	rep = s.Handle(ctx, agent.Request{Op: agent.OpGPUSuspend, LockTimeout: 5 * time.Second})
	var report struct {
		Op       string `json:"op"`
		Outcomes []any  `json:"outcomes"`
	}
	if rep.Error != "" || json.Unmarshal(rep.Report, &report) != nil || report.Op != "suspend" || len(report.Outcomes) != 1 {
		t.Fatalf("suspend: %+v", rep)
	}
	rep = s.Handle(ctx, agent.Request{Op: agent.OpGPUResume, DeviceMap: "GPU-a=GPU-b"})
	if rep.Error != "" {
		t.Fatalf("resume: %+v", rep)
	}
	if rep = s.Handle(ctx, agent.Request{Op: agent.OpGPUStatus}); rep.Error != "" || !strings.Contains(string(rep.Report), `"op":"status"`) {
		t.Fatalf("status: %+v", rep)
	}
	write(t, filepath.Join(bin, "fail"), "", 0o644)
	rep = s.Handle(ctx, agent.Request{Op: agent.OpGPUSuspend})
	if !strings.Contains(rep.Error, "stasis-cuda suspend: pid 7: injected") || len(rep.Report) == 0 {
		t.Fatalf("failing helper: %+v", rep)
	}
	calls, _ := os.ReadFile(filepath.Join(bin, "calls"))
	if want := "suspend --all --json --timeout 5s\nresume --all --json --device-map GPU-a=GPU-b\nstatus --all --json\nsuspend --all --json\n"; string(calls) != want {
		t.Fatalf("helper calls:\n%s\nwant:\n%s", calls, want)
	}

	s.Helper = filepath.Join(bin, "missing")
	rep = s.Handle(ctx, agent.Request{Op: agent.OpGPUResume})
	if !strings.Contains(rep.Error, "no stasis-cuda at "+s.Helper) {
		t.Fatalf("missing helper: %+v", rep)
	}
}

func TestExecAndStart(t *testing.T) {
	out := &strings.Builder{}
	s := &agent.Server{Output: out}
	ctx := context.Background()
	rep := s.Handle(ctx, agent.Request{Op: agent.OpExec, Process: &agent.Process{Args: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}}})
	if rep.Error != "" || rep.Exec.ExitCode != 3 || string(rep.Exec.Stdout) != "out\n" || string(rep.Exec.Stderr) != "err\n" {
		t.Fatalf("exec: %+v", rep)
	}
	// Its standard input, whole.
	if rep := s.Handle(ctx, agent.Request{Op: agent.OpExec, Process: &agent.Process{Args: []string{"/bin/cat"}, Stdin: []byte("hi\n")}}); rep.Error != "" || string(rep.Exec.Stdout) != "hi\n" {
		t.Fatalf("exec with stdin: %+v", rep)
	}
	// A program that is not there exits 127 with the reason, as in a shell.
	if rep := s.Handle(ctx, agent.Request{Op: agent.OpExec, Process: &agent.Process{Args: []string{"/no/such/program"}}}); rep.Error != "" || rep.Exec.ExitCode != 127 || !strings.Contains(string(rep.Exec.Stderr), "/no/such/program") {
		t.Fatalf("exec of a missing program: %+v", rep)
	}
	if rep := s.Handle(ctx, agent.Request{Op: agent.OpStart}); rep.Error != "no command given" {
		t.Fatalf("start without a process: %+v", rep)
	}
	rep = s.Handle(ctx, agent.Request{Op: agent.OpStart, Process: &agent.Process{Args: []string{"/bin/sh", "-c", "read x"}}})
	if rep.Error != "" || rep.PID == 0 {
		t.Fatalf("start: %+v", rep)
	}
	defer func() { _ = syscallKill(rep.PID) }()
	if again := s.Handle(ctx, agent.Request{Op: agent.OpStart, Process: &agent.Process{Args: []string{"/bin/true"}}}); !strings.Contains(again.Error, "already started") {
		t.Fatalf("second start: %+v", again)
	}
	if rep := s.Handle(ctx, agent.Request{Op: "reboot"}); rep.Error != `unknown op "reboot"` {
		t.Fatalf("unknown op: %+v", rep)
	}
}

func syscallKill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// serve runs a Server on a unix socket; before serving each connection it
// writes what stale holds, as a port does that an earlier client left.
func serve(t *testing.T, s *agent.Server, stale string) string {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte(stale))
			go func() { _ = s.Serve(context.Background(), conn); conn.Close() }()
		}
	}()
	return socket
}

func TestClientSkipsStaleReplies(t *testing.T) {
	socket := serve(t, &agent.Server{Root: guest(t)}, `{"id":1,"error":"an answer to someone else"}`+"\n")
	ctx := context.Background()
	c, err := agent.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The reply left for an earlier client (id 1) is skipped.
	if _, err := c.Call(ctx, agent.Request{Op: agent.OpPing}); err != nil {
		t.Fatal(err)
	}
	rep, err := c.Call(ctx, agent.Request{Op: agent.OpFacts})
	if err != nil || rep.Facts == nil {
		t.Fatalf("facts: %+v %v", rep, err)
	}
	if _, err := c.Call(ctx, agent.Request{Op: "nope"}); err == nil || err.Error() != `guest agent nope: unknown op "nope"` {
		t.Fatalf("unknown op: %v", err)
	}
}

func TestClientGivesUpWhenNoOneAnswers(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "silent.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c, err := agent.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Call(ctx, agent.Request{Op: agent.OpPing})
	if !errors.Is(err, agent.ErrNoReply) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNoReply with the deadline", err)
	}
}

func TestOpenPortFindsThePortByName(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "sys/class/virtio-ports/vport0p1/name"), "org.qemu.guest_agent.0\n", 0o644)
	write(t, filepath.Join(root, "sys/class/virtio-ports/vport0p2/name"), agent.PortName+"\n", 0o644)
	write(t, filepath.Join(root, "dev/vport0p2"), "", 0o644)
	p, err := agent.OpenPort(filepath.Join(root, "sys"), filepath.Join(root, "dev"), agent.PortName)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	_, err = agent.OpenPort(filepath.Join(root, "sys"), filepath.Join(root, "dev"), "org.example.none")
	if err == nil || !strings.Contains(err.Error(), "no virtio-serial port named org.example.none") {
		t.Fatalf("missing port: %v", err)
	}
}
