// Package node collects this node's fingerprint (package fingerprint): it
// reads /proc, uname, the GPUs through a gpu.Source and the runtime's own
// report.
package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/runtime"
)

// Collector reads this node's fingerprint.
type Collector struct {
	GPU     gpu.Source
	Runtime runtime.Info
	// CheckpointAPI says whether the host's CUDA driver library exports
	// the checkpoint API (cuda.CheckpointAPI); nil records it as not
	// checked. It is a function so that this package links no CUDA
	// binding.
	CheckpointAPI func() error
	// ProcDir is where /proc is mounted; "/proc" when empty.
	ProcDir string
}

// Collect reads every fact afresh. A node without GPUs is a valid node.
func (c Collector) Collect(ctx context.Context) (fingerprint.Fingerprint, error) {
	f := fingerprint.Fingerprint{FormatVersion: fingerprint.FormatVersion, CollectedAt: time.Now().UTC(), Arch: goruntime.GOARCH, Runtime: c.Runtime}
	var err error
	if f.Hostname, err = os.Hostname(); err != nil {
		return f, fmt.Errorf("hostname: %w", err)
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return f, fmt.Errorf("uname: %w", err)
	}
	f.Kernel = unix.ByteSliceToString(uts.Release[:])
	if f.CPU, err = c.cpu(); err != nil {
		return f, err
	}
	if f.Memory, err = c.memory(); err != nil {
		return f, err
	}
	if c.GPU != nil {
		if f.GPU, err = c.GPU.Info(ctx); err != nil {
			return f, fmt.Errorf("GPU facts: %w", err)
		}
	} else {
		f.GPU.Reason = "no GPU source configured"
	}
	f.CheckpointAPI = c.checkpointAPI()
	return f, f.Validate()
}

func (c Collector) proc(name string) string {
	dir := c.ProcDir
	if dir == "" {
		dir = "/proc"
	}
	return dir + "/" + name
}

// cpu reads the first processor of /proc/cpuinfo: every core of a node
// reports the same model and flags.
func (c Collector) cpu() (fingerprint.CPU, error) {
	data, err := os.ReadFile(c.proc("cpuinfo"))
	if err != nil {
		return fingerprint.CPU{}, fmt.Errorf("CPU facts: %w", err)
	}
	var cpu fingerprint.CPU
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			if cpu.Model != "" || cpu.Flags != nil {
				break // end of the first processor
			}
			continue
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(key) {
		case "vendor_id", "CPU implementer":
			cpu.Vendor = value
		case "model name", "CPU part":
			if cpu.Model == "" {
				cpu.Model = value
			}
		case "flags", "Features":
			cpu.Flags = strings.Fields(value)
		}
	}
	return cpu, sc.Err()
}

func (c Collector) memory() (fingerprint.Memory, error) {
	fields, err := procfs.Meminfo(c.proc("meminfo"))
	if err != nil {
		return fingerprint.Memory{}, fmt.Errorf("memory facts: %w", err)
	}
	return fingerprint.Memory{Total: fields["MemTotal"], Available: fields["MemAvailable"]}, nil
}

func (c Collector) checkpointAPI() fingerprint.Support {
	if c.CheckpointAPI == nil {
		return fingerprint.Support{Reason: "not checked"}
	}
	if err := c.CheckpointAPI(); err != nil {
		return fingerprint.Support{Reason: err.Error()}
	}
	return fingerprint.Support{Available: true}
}
