package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/internal/procfs"
)

// Server answers requests inside the guest.
type Server struct {
	// Helper is stasis-cuda's path in the guest.
	Helper string
	// NVIDIADevice is the device file whose absence means the guest has no
	// NVIDIA GPU, so a GPU step has nothing to do.
	NVIDIADevice string
	// Output receives the workload's standard output and error (the
	// guest's console).
	Output io.Writer
	// Root is where the guest's /proc and /sys are; "/" when empty.
	Root string

	// gpu serialises GPU steps: two at once would fight over the same
	// processes.
	gpu      sync.Mutex
	mu       sync.Mutex
	workload *exec.Cmd
	state    Workload
}

// maxLine bounds one request line; a longer one is refused.
const maxLine = 1 << 20

// Serve answers the requests read from conn, one at a time, until conn
// ends; ctx bounds the commands the requests run.
func (s *Server) Serve(ctx context.Context, conn io.ReadWriter) error {
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	enc := json.NewEncoder(conn)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var req Request
		var rep Reply
		if err := json.Unmarshal(line, &req); err != nil {
			rep.Error = fmt.Sprintf("malformed request: %v", err)
		} else {
			rep = s.Handle(ctx, req)
		}
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("agent: write reply: %w", err)
		}
	}
	return sc.Err()
}

// Handle answers one request.
func (s *Server) Handle(ctx context.Context, req Request) Reply {
	rep := Reply{ID: req.ID}
	var err error
	switch req.Op {
	case OpPing:
	case OpFacts:
		rep.Facts, err = s.facts()
	case OpWorkload:
		s.mu.Lock()
		w := s.state
		s.mu.Unlock()
		rep.Workload = &w
	case OpStart:
		rep.PID, err = s.start(req.Process)
	case OpExec:
		rep.Exec, err = s.exec(ctx, req.Process)
	case OpGPUStatus:
		rep.Report, rep.Skipped, err = s.gpuStep(ctx, helper.Status, 0, "")
	case OpGPUSuspend:
		rep.Report, rep.Skipped, err = s.gpuStep(ctx, helper.Suspend, req.LockTimeout, "")
	case OpGPUResume:
		rep.Report, rep.Skipped, err = s.gpuStep(ctx, helper.Resume, 0, req.DeviceMap)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	return rep
}

func (s *Server) path(p string) string {
	if s.Root == "" {
		return p
	}
	return filepath.Join(s.Root, p)
}

func checkProcess(p *Process) error {
	if p == nil || len(p.Args) == 0 {
		return errors.New("no command given")
	}
	return nil
}

func (s *Server) command(ctx context.Context, p *Process) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.Args[0], p.Args[1:]...)
	cmd.Env = p.Env
	if len(cmd.Env) == 0 {
		cmd.Env = []string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin"}
	}
	cmd.Dir = p.Cwd
	return cmd
}

// start runs the workload in its own session, its output on the console;
// the agent keeps its exit status.
func (s *Server) start(p *Process) (int, error) {
	if err := checkProcess(p); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workload != nil {
		return 0, fmt.Errorf("the workload was already started (pid %d)", s.state.PID)
	}
	cmd := s.command(context.Background(), p)
	cmd.Stdout, cmd.Stderr = s.Output, s.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w", p.Args[0], err)
	}
	s.workload = cmd
	s.state = Workload{PID: cmd.Process.Pid, Running: true}
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.state.Running = false
		s.state.ExitCode = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.state.Signal = int(ws.Signal())
		}
		if err != nil {
			s.state.Error = err.Error()
		}
	}()
	return cmd.Process.Pid, nil
}

func (s *Server) exec(ctx context.Context, p *Process) (*ExecResult, error) {
	if err := checkProcess(p); err != nil {
		return nil, err
	}
	cmd := s.command(ctx, p)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if p.Stdin != nil {
		cmd.Stdin = bytes.NewReader(p.Stdin)
	}
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		// As a shell answers for a program that is not there.
		return &ExecResult{ExitCode: 127, Stderr: fmt.Appendf(nil, "%s: %v\n", p.Args[0], err)}, nil
	}
	if err != nil && !errors.As(err, &exit) {
		return nil, fmt.Errorf("run %s: %w", p.Args[0], err)
	}
	return &ExecResult{ExitCode: cmd.ProcessState.ExitCode(), Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// gpuStep runs stasis-cuda's group verb over every CUDA process of the
// guest, or says why there is nothing to do.
func (s *Server) gpuStep(ctx context.Context, verb string, lockTimeout time.Duration, deviceMap string) (json.RawMessage, string, error) {
	s.gpu.Lock()
	defer s.gpu.Unlock()
	if _, err := os.Stat(s.path(s.NVIDIADevice)); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Sprintf("not needed: the guest has no NVIDIA device (%s absent)", s.NVIDIADevice), nil
	}
	if _, err := os.Stat(s.Helper); err != nil {
		return nil, "", fmt.Errorf("the guest has an NVIDIA device but no stasis-cuda at %s: put the helper in the guest image: %w", s.Helper, err)
	}
	res, err := s.exec(ctx, &Process{Args: helper.Args(s.Helper, verb, lockTimeout, deviceMap)})
	if err != nil {
		return nil, "", err
	}
	raw, err := helper.Result(verb, res.ExitCode, res.Stdout, res.Stderr)
	return raw, "", err
}

func (s *Server) facts() (*Facts, error) {
	f := &Facts{}
	release, err := os.ReadFile(s.path("/proc/sys/kernel/osrelease"))
	if err != nil {
		return nil, fmt.Errorf("kernel release: %w", err)
	}
	f.Kernel = strings.TrimSpace(string(release))
	mem, err := procfs.Meminfo(s.path("/proc/meminfo"))
	if err != nil {
		return nil, fmt.Errorf("guest memory: %w", err)
	}
	f.MemTotal, f.MemFree = mem["MemTotal"], mem["MemFree"]
	if v, err := os.ReadFile(s.path("/sys/module/nvidia/version")); err == nil {
		f.NVIDIADriver = strings.TrimSpace(string(v))
	}
	if f.PCIDevices, err = pciDevices(s.path("/sys/bus/pci/devices")); err != nil {
		return nil, err
	}
	s.mu.Lock()
	f.Workload = s.state
	s.mu.Unlock()
	return f, nil
}

func pciDevices(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("PCI devices: %w", err)
	}
	devices := []string{}
	for _, e := range entries {
		vendor, err1 := os.ReadFile(filepath.Join(dir, e.Name(), "vendor"))
		device, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "device"))
		if err1 != nil || err2 != nil {
			continue // unplugged while we read
		}
		devices = append(devices, fmt.Sprintf("%s:%s@%s", hexID(vendor), hexID(device), e.Name()))
	}
	sort.Strings(devices)
	return devices, nil
}

func hexID(b []byte) string { return strings.TrimPrefix(strings.TrimSpace(string(b)), "0x") }
