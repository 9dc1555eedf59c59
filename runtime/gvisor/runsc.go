// Package gvisor implements runtime.Runtime with gVisor's runsc command line.
//
// Every container operation is one runsc invocation with the same global
// flags (state root, platform, network, nvproxy ABI). What the runsc in hand
// can do is detected once, in New, from its own help output, so newer and
// older builds are used for what they offer rather than by version number.
package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
)

// Config says which runsc to drive and how.
type Config struct {
	// Runsc is the runsc binary; empty finds "runsc" on PATH.
	Runsc string
	// Root is runsc's state folder (--root); empty uses /run/stasis/runsc.
	Root string
	// Platform is runsc's --platform; empty uses systrap, which needs no
	// hardware virtualisation.
	Platform string
	// Network is runsc's --network (sandbox, host or none); empty leaves
	// runsc's default.
	Network string
	// NvproxyDriverVersion is the driver ABI runsc uses for GPU sandboxes
	// when the host's driver is missing from runsc's ABI table. Stasis never
	// picks one by itself; when it is needed and empty, GPU sandboxes are
	// refused with the versions runsc supports.
	NvproxyDriverVersion string
	// HostDriverVersion overrides the NVIDIA driver version read from
	// /proc/driver/nvidia/version.
	HostDriverVersion string
	// DebugLogDir, when set, makes runsc write debug logs there.
	DebugLogDir string
}

// Runsc drives one runsc binary. It is safe for concurrent use on different
// containers.
type Runsc struct {
	cfg      Config
	path     string
	features Features
}

var _ runtime.Runtime = (*Runsc)(nil)

// DefaultRoot is runsc's state folder unless Config.Root says otherwise.
const DefaultRoot = "/run/stasis/runsc"

// New finds runsc and detects what it can do.
func New(ctx context.Context, cfg Config) (*Runsc, error) {
	path := cfg.Runsc
	if path == "" {
		path = "runsc"
	}
	resolved, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("find runsc %q: %w (install it with scripts/install-runsc.sh or set its path)", path, err)
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.Platform == "" {
		cfg.Platform = "systrap"
	}
	if cfg.HostDriverVersion == "" {
		cfg.HostDriverVersion = HostDriverVersion()
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("runsc state folder: %w", err)
	}
	features, err := Detect(ctx, resolved)
	if err != nil {
		return nil, err
	}
	return &Runsc{cfg: cfg, path: resolved, features: features}, nil
}

// Info names gVisor, the runsc build (a checkpoint restores only into the
// same one), its platform and the nvproxy ABI GPU sandboxes run with: the
// configured one when runsc does not know the host's driver, the host
// driver's own otherwise ("" on a node without one).
func (r *Runsc) Info() runtime.Info {
	abi, err := r.nvproxyABI()
	if err == nil && abi == "" {
		abi = r.cfg.HostDriverVersion
	}
	return runtime.Info{Name: "gvisor", Version: r.features.Version, Platform: r.cfg.Platform, GPUABI: abi}
}

// Features is what the runsc in hand supports.
func (r *Runsc) Features() Features { return r.features }

// Capabilities are the checkpoint and restore options this runsc takes.
func (r *Runsc) Capabilities() runtime.Capabilities {
	return runtime.Capabilities{CUDACheckpoint: r.features.CudaCheckpointPath, Direct: r.features.Direct, ExcludeZeroPages: r.features.ExcludeCommittedZeroPages, LazyImage: true,
		// runsc writes its pages file through one writer, in order, unless
		// --direct (then in parallel; pkg/sentry/state/stateio's
		// FDWriter), and its state files as streams.
		AppendImage: true}
}

// Path is the runsc binary in use.
func (r *Runsc) Path() string { return r.path }

// Root is runsc's state folder.
func (r *Runsc) Root() string { return r.cfg.Root }

// GlobalFlags are the flags every invocation gets; a snapshot records them.
func (r *Runsc) GlobalFlags() []string {
	flags := []string{"--root", r.cfg.Root, "--platform", r.cfg.Platform}
	if r.cfg.Network != "" {
		flags = append(flags, "--network", r.cfg.Network)
	}
	if r.cfg.DebugLogDir != "" {
		flags = append(flags, "--debug", "--debug-log", filepath.Clean(r.cfg.DebugLogDir)+"/")
	}
	return flags
}

// invocation is one runsc command line.
type invocation struct {
	args []string
	// gpu adds the nvproxy flags a GPU sandbox needs.
	gpu bool
	// container is the existing container the command is about: it is
	// refused where no container has that id but one id begins with it,
	// which runsc would take for it (prefixTaken).
	container string
	// talks says the command talks to the container's running sandbox
	// (state, checkpoint, pause): run ends the command, with an error
	// that says so, where that sandbox's process is stopped and cannot
	// answer.
	talks bool
}

func (r *Runsc) command(ctx context.Context, inv invocation) (*exec.Cmd, error) {
	if inv.container != "" {
		if err := r.prefixTaken(inv.container); err != nil {
			return nil, fmt.Errorf("runsc %s: %w", strings.Join(inv.args, " "), err)
		}
	}
	args := r.GlobalFlags()
	if inv.gpu {
		abi, err := r.nvproxyABI()
		if err != nil {
			return nil, err
		}
		if abi != "" {
			args = append(args, "--nvproxy-driver-version", abi)
		}
	}
	return exec.CommandContext(ctx, r.path, append(args, inv.args...)...), nil
}

// run runs runsc and returns its standard output; a failure carries what
// runsc said on standard error.
func (r *Runsc) run(ctx context.Context, inv invocation) ([]byte, error) {
	if inv.talks {
		ctx, ended := r.watchStopped(ctx, inv.container)
		out, err := r.runCommand(ctx, inv)
		if stopped := ended(); stopped != nil && err != nil {
			return out, fmt.Errorf("runsc %s: %w", strings.Join(inv.args, " "), stopped)
		}
		return out, err
	}
	return r.runCommand(ctx, inv)
}

func (r *Runsc) runCommand(ctx context.Context, inv invocation) ([]byte, error) {
	cmd, err := r.command(ctx, inv)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), r.commandError(ctx, inv.args, err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// runDetached runs a runsc command whose container keeps the command's
// standard output and error (create, restore): they go to consoleLog, and
// runsc's own messages to a log file read back on failure. Pipes cannot be
// used, as the sandbox would hold them open after runsc returns.
func (r *Runsc) runDetached(ctx context.Context, inv invocation, consoleLog string) error {
	logFile, err := os.CreateTemp("", "stasis-runsc-*.log")
	if err != nil {
		return err
	}
	logPath := logFile.Name()
	logFile.Close()
	defer os.Remove(logPath)
	console, err := openConsole(consoleLog)
	if err != nil {
		return err
	}
	defer console.Close()
	subcommand := inv.args
	inv.args = append([]string{"--log", logPath}, subcommand...)
	cmd, err := r.command(ctx, inv)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = console, console
	if err := cmd.Run(); err != nil {
		return r.commandError(ctx, subcommand, err, runscLogErrors(logPath))
	}
	return nil
}

func openConsole(path string) (*os.File, error) {
	if path == "" {
		return os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	return f, nil
}

// runscLogErrors picks the messages out of runsc's JSON log.
func runscLogErrors(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var msgs []string
	for _, line := range strings.Split(string(data), "\n") {
		var entry struct {
			Msg   string `json:"msg"`
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && (entry.Level == "error" || entry.Level == "warning") {
			msgs = append(msgs, entry.Msg)
		} else if strings.TrimSpace(line) != "" && entry.Msg == "" {
			msgs = append(msgs, strings.TrimSpace(line))
		}
	}
	return strings.Join(msgs, "; ")
}

// commandError names the runsc command, its exit and what it said.
func (r *Runsc) commandError(ctx context.Context, args []string, err error, said string) error {
	if ctx.Err() != nil {
		return fmt.Errorf("runsc %s: %w", strings.Join(args, " "), ctx.Err())
	}
	said = trimRunscOutput(said)
	switch {
	case containerGone(said):
		err = fmt.Errorf("%w: %w", runtime.ErrNotFound, err)
	case strings.Contains(said, "is ambiguous and could refer to multiple containers"):
		// runsc resolves ids by prefix: this one begins another's. Never
		// a sign that the container is gone.
		err = errdefs.Mark(fmt.Errorf("runsc cannot tell the container from another whose id begins with its own (runsc resolves ids by prefix: name containers so that no id begins another; stasisd does, but a sandbox an older stasisd named keeps its name until its actor's next resume): %w", err), errdefs.ErrFailedPrecondition)
	case strings.Contains(said, "creating process: failed to load") || strings.Contains(said, "executable file not found"):
		// The bundle's process is not in its root filesystem (or not
		// executable there): the template's mistake, not stasisd's.
		err = errdefs.Mark(fmt.Errorf("the process the bundle names cannot be started from its root filesystem (check the template's args and rootfs): %w", err), errdefs.ErrInvalidArgument)
	case strings.Contains(said, "no space left on device"):
		// runsc writes its state (--root), a checkpoint's image and the
		// sandbox's files: one of their disks is full.
		err = errdefs.Mark(fmt.Errorf("a disk runsc writes to is full (make room on it): %w", err), errdefs.ErrResourceExhausted)
	}
	if said == "" {
		return fmt.Errorf("runsc %s: %w", strings.Join(args, " "), err)
	}
	return fmt.Errorf("runsc %s: %w: %s", strings.Join(args, " "), err, said)
}

// maxSaid bounds how much of runsc's output an error carries.
const maxSaid = 2000

// trimRunscOutput keeps what runsc said before any Go stack dump (a failed
// checkpoint prints the sandbox's panic trace), bounded in length.
func trimRunscOutput(said string) string {
	if i := strings.Index(said, "\ngoroutine "); i >= 0 {
		said = said[:i]
	}
	said = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(said), ":"))
	if len(said) > maxSaid {
		said = said[:maxSaid] + " [...]"
	}
	return said
}

// containerGone tells from what runsc said that the container is not there:
// no state file matches its id, or the state file went away while runsc
// read it (a runsc delete killed half way leaves that, with the sandbox
// already stopped: runsc stops it before it removes the state file).
func containerGone(said string) bool {
	return strings.Contains(said, "loading container") &&
		(strings.Contains(said, "file does not exist") || strings.Contains(said, "no such file or directory"))
}

// isNotFound tells whether err says the container does not exist.
func isNotFound(err error) bool { return errors.Is(err, runtime.ErrNotFound) }
