package gvisor

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
)

// Features is what a runsc build can do, read from its own help output.
type Features struct {
	// Version is the gvisor.dev/gvisor module version runsc was built from
	// (with its commit when the build recorded one), or the first line of
	// `runsc --version`.
	Version string `json:"version"`
	// CudaCheckpointPath: runsc runs a cuda-checkpoint compatible helper
	// itself around checkpoint and restore (--cuda-checkpoint-path), one
	// process at a time with --cuda-checkpoint-sequential.
	CudaCheckpointPath       bool `json:"cudaCheckpointPath"`
	CudaCheckpointSequential bool `json:"cudaCheckpointSequential"`
	// Direct: checkpoint and restore take --direct (O_DIRECT page I/O).
	Direct bool `json:"direct"`
	// ExcludeCommittedZeroPages: checkpoint takes
	// --exclude-committed-zero-pages.
	ExcludeCommittedZeroPages bool `json:"excludeCommittedZeroPages"`
	// SaveRestoreExecArgv: checkpoint takes a helper to run in the sandbox
	// before saving and after restoring; it can be set once per lineage.
	SaveRestoreExecArgv bool `json:"saveRestoreExecArgv"`
	// Background: restore can load memory after it returns.
	Background bool `json:"background"`
	// Compression lists the checkpoint -compression values.
	Compression []string `json:"compression,omitempty"`
	// NvproxyDrivers lists the NVIDIA driver versions whose ABI runsc knows.
	NvproxyDrivers []string `json:"nvproxyDrivers,omitempty"`
}

var (
	compressionValues   = regexp.MustCompile(`Values: ([a-z0-9|-]+)`)
	driverVersion       = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)
	kernelModuleVersion = regexp.MustCompile(`Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)`)
)

// Detect asks the runsc binary at path what it supports.
func Detect(ctx context.Context, path string) (Features, error) {
	var f Features
	help := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	f.Version = runscVersion(ctx, path)
	global, err := help("flags")
	if err != nil {
		return f, fmt.Errorf("runsc flags (is %s a runsc binary?): %w: %s", path, err, firstLine(global))
	}
	checkpoint, _ := help("help", "checkpoint")
	// The flag is a checkpoint flag in the builds that have it (a global
	// one in some): either place counts.
	f.CudaCheckpointPath = strings.Contains(global, "-cuda-checkpoint-path") || strings.Contains(checkpoint, "-cuda-checkpoint-path")
	f.CudaCheckpointSequential = strings.Contains(checkpoint, "-cuda-checkpoint-sequential")
	f.Direct = strings.Contains(checkpoint, "-direct")
	f.ExcludeCommittedZeroPages = strings.Contains(checkpoint, "-exclude-committed-zero-pages")
	f.SaveRestoreExecArgv = strings.Contains(checkpoint, "-save-restore-exec-argv")
	if m := compressionValues.FindStringSubmatch(checkpoint); m != nil {
		f.Compression = strings.Split(m[1], "|")
	}
	restore, _ := help("help", "restore")
	f.Background = strings.Contains(restore, "-background")
	f.Direct = f.Direct && strings.Contains(restore, "-direct")
	if drivers, err := help("nvproxy", "list-supported-drivers"); err == nil {
		for _, line := range strings.Fields(drivers) {
			if driverVersion.MatchString(line) {
				f.NvproxyDrivers = append(f.NvproxyDrivers, line)
			}
		}
	}
	return f, nil
}

func runscVersion(ctx context.Context, path string) string {
	if info, err := buildinfo.ReadFile(path); err == nil {
		mods := append([]*debug.Module{&info.Main}, info.Deps...)
		for _, m := range mods {
			if m.Path == "gvisor.dev/gvisor" && m.Version != "" && m.Version != "(devel)" {
				return m.Version
			}
		}
	}
	out, _ := exec.CommandContext(ctx, path, "--version").Output()
	return strings.TrimPrefix(firstLine(string(out)), "runsc version ")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// HostDriverVersion reads the loaded NVIDIA kernel module's version, or ""
// on a machine without one.
func HostDriverVersion() string {
	data, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return ""
	}
	m := kernelModuleVersion.FindSubmatch(data)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// nvproxyABI is the --nvproxy-driver-version a GPU sandbox needs: none when
// runsc knows the host's driver, the configured one otherwise.
func (r *Runsc) nvproxyABI() (string, error) {
	host := r.cfg.HostDriverVersion
	known := r.features.NvproxyDrivers
	if host != "" && (len(known) == 0 || slices.Contains(known, host)) {
		return "", nil
	}
	if r.cfg.NvproxyDriverVersion != "" {
		return r.cfg.NvproxyDriverVersion, nil
	}
	if host == "" {
		return "", fmt.Errorf("GPU sandbox: no NVIDIA driver found (/proc/driver/nvidia/version is missing); set the host driver version or the nvproxy driver ABI explicitly")
	}
	return "", fmt.Errorf("GPU sandbox: host NVIDIA driver %s is not in this runsc's nvproxy ABI table (%s); upgrade runsc, or set the nvproxy driver ABI to use explicitly (the newest it knows of the same branch is %s)",
		host, strings.Join(known, ", "), newestOfBranch(known, host))
}

// NvproxyNotice says, for the actor's events, when GPU sandboxes run with a
// driver ABI other than the host's; "" when they do not.
func (r *Runsc) NvproxyNotice() string {
	abi, err := r.nvproxyABI()
	if err != nil || abi == "" {
		return ""
	}
	return fmt.Sprintf("host NVIDIA driver %s is not in runsc's nvproxy ABI table; GPU sandboxes run with the configured driver ABI %s", r.cfg.HostDriverVersion, abi)
}

func newestOfBranch(known []string, host string) string {
	branch, _, _ := strings.Cut(host, ".")
	best := "none"
	for _, v := range known {
		if strings.HasPrefix(v, branch+".") {
			best = v
		}
	}
	return best
}
