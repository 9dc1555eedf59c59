package microvm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// Annotations of a micro-VM actor's OCI bundle.
const (
	// AnnotationDevices lists the PCI devices the VM gets, as a JSON array
	// of Device; a suspend detaches the hot-pluggable ones (the GPU).
	AnnotationDevices = "org.stasis.microvm.devices"
	// AnnotationCPUs is the number of virtual CPUs (1 when absent).
	AnnotationCPUs = "org.stasis.microvm.cpus"
)

// DefaultMemory is the guest memory of a bundle without a memory limit.
const DefaultMemory = 256 << 20

// Device is a PCI device given to the VM: QEMU's -device DRIVER,id=ID,
// PROPS. A GPU is {"id":"gpu0","driver":"vfio-pci","props":{"host":
// "0000:3b:00.0"}}; the CPU tests use a stand-in such as virtio-rng-pci.
type Device struct {
	ID     string            `json:"id"`
	Driver string            `json:"driver"`
	Props  map[string]string `json:"props,omitempty"`
}

// Spec is a micro-VM as its OCI bundle describes it: the spec's vm section
// names the kernel, initramfs and kernel command line, the memory limit is
// the guest's memory, and the process is the workload the guest agent
// starts.
type Spec struct {
	Kernel      string        `json:"kernel"`
	Initrd      string        `json:"initrd"`
	Cmdline     string        `json:"cmdline,omitempty"`
	MemoryBytes uint64        `json:"memoryBytes"`
	CPUs        int           `json:"cpus"`
	Devices     []Device      `json:"devices,omitempty"`
	Process     agent.Process `json:"process"`
}

// LoadSpec reads the micro-VM of the bundle in dir. Relative paths are
// taken from the bundle folder.
func LoadSpec(dir string) (Spec, error) {
	oci, err := bundle.Load(dir)
	if err != nil {
		return Spec{}, err
	}
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("micro-VM bundle %s: %s", dir, fmt.Sprintf(format, args...))
	}
	if oci.VM == nil || oci.VM.Kernel.Path == "" || oci.VM.Kernel.InitRD == "" {
		return bad("the spec's vm section must name kernel.path and kernel.initrd")
	}
	if oci.Process == nil || len(oci.Process.Args) == 0 {
		return bad("no process to start in the guest")
	}
	s := Spec{
		Kernel:      abs(dir, oci.VM.Kernel.Path),
		Initrd:      abs(dir, oci.VM.Kernel.InitRD),
		Cmdline:     strings.Join(oci.VM.Kernel.Parameters, " "),
		MemoryBytes: DefaultMemory,
		CPUs:        1,
		Process:     agent.Process{Args: oci.Process.Args, Env: oci.Process.Env, Cwd: oci.Process.Cwd},
	}
	for _, f := range []string{s.Kernel, s.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return bad("%v", err)
		}
	}
	if r := oci.Linux; r != nil && r.Resources != nil && r.Resources.Memory != nil && r.Resources.Memory.Limit != nil {
		limit := *r.Resources.Memory.Limit
		if limit < 64<<20 || limit%(1<<20) != 0 {
			return bad("memory limit %d: the guest's memory must be whole MiB, at least 64 MiB", limit)
		}
		s.MemoryBytes = uint64(limit)
	}
	if v, ok := oci.Annotations[AnnotationCPUs]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 256 {
			return bad("annotation %s=%q: want a number of CPUs from 1 to 256", AnnotationCPUs, v)
		}
		s.CPUs = n
	}
	if v, ok := oci.Annotations[AnnotationDevices]; ok {
		if err := json.Unmarshal([]byte(v), &s.Devices); err != nil {
			return bad("annotation %s: %v", AnnotationDevices, err)
		}
		seen := map[string]bool{}
		for _, d := range s.Devices {
			if d.ID == "" || d.Driver == "" || seen[d.ID] || reservedIDs[d.ID] {
				return bad("annotation %s: every device needs a driver and an id of its own (not %q)", AnnotationDevices, d.ID)
			}
			seen[d.ID] = true
		}
	}
	return s, nil
}

func abs(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}
