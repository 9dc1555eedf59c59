package templates

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/service/hostpolicy"
)

// validateVM checks what a micro-VM template adds: its guest (a bundle's
// vm section, or the template's vm and args), its devices, and that it
// asks for nothing a VM does not have.
func (s *Templates) validateVM(t *api.Template) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: micro-VM template %s: %s", errdefs.ErrInvalidArgument, t.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case t.Rootfs != "":
		return refuse("a micro-VM boots a kernel, not a rootfs: give vm (kernel and initramfs) and args, or a bundle with a vm section")
	case len(t.Durable) > 0:
		return refuse("durable folders are host folders bound into a gVisor sandbox; a micro-VM has none")
	case t.MemoryBytes != 0 && (t.MemoryBytes < 64<<20 || t.MemoryBytes%(1<<20) != 0):
		return refuse("memoryBytes %d: a guest's memory is whole MiB, at least 64 MiB", t.MemoryBytes)
	case t.Bundle != "" && t.VM != nil:
		return refuse("give a bundle with a vm section, or vm and args, not both")
	}
	devices := 0
	if t.Bundle != "" {
		spec, err := s.loadBundle(*t)
		if err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
		if spec.VM == nil {
			return refuse("the bundle %s has no vm section (kernel.path, kernel.initrd)", t.Bundle)
		}
		if t.MemoryBytes == 0 {
			// Shown as the guest gets it: the bundle's limit, or the
			// default.
			t.MemoryBytes = microvm.DefaultMemory
			if r := spec.Linux; r != nil && r.Resources != nil && r.Resources.Memory != nil && r.Resources.Memory.Limit != nil && *r.Resources.Memory.Limit > 0 {
				t.MemoryBytes = *r.Resources.Memory.Limit
			}
		}
		if v := spec.Annotations[microvm.AnnotationDevices]; v != "" {
			var d []api.Device
			_ = json.Unmarshal([]byte(v), &d) // checked by loadBundle
			devices = len(d)
		}
	} else {
		if t.MemoryBytes == 0 {
			t.MemoryBytes = microvm.DefaultMemory
		}
		vm := t.VM
		switch {
		case vm == nil:
			return refuse("no guest: give vm (kernel and initramfs) and args, or a bundle with a vm section")
		case len(t.Args) == 0:
			return refuse("no args: the guest agent starts them as the workload")
		case vm.CPUs < 0 || vm.CPUs > 256:
			return refuse("vm.cpus %d: want 1 to 256", vm.CPUs)
		}
		for what, path := range map[string]string{"vm.kernel": vm.Kernel, "vm.initramfs": vm.Initramfs} {
			if !filepath.IsAbs(path) {
				return refuse("%s %q must be an absolute path", what, path)
			}
			if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
				return refuse("%s %s is not a file", what, path)
			}
			if err := s.cfg.HostPaths.Allows("guest "+what[len("vm."):], path, false); err != nil {
				return fmt.Errorf("template %s: %w", t.Name, err)
			}
		}
		if err := hostpolicy.CheckVMDevices(vm.Devices); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
		devices = len(vm.Devices)
	}
	if t.GPUs > devices {
		return refuse("gpus %d, and the VM gets %d devices: a micro-VM's GPU is passed through as a device (driver vfio-pci, props host)", t.GPUs, devices)
	}
	return nil
}

// vmSpec is the OCI spec of a micro-VM template without a bundle.
func (s *Templates) vmSpec(t api.Template) (*specs.Spec, error) {
	vm := t.VM
	for what, path := range map[string]string{"kernel": vm.Kernel, "initramfs": vm.Initramfs} {
		if err := s.cfg.HostPaths.Allows("guest "+what, path, false); err != nil {
			return nil, err
		}
	}
	spec := &specs.Spec{
		Version:     specs.Version,
		Process:     &specs.Process{Args: t.Args, Cwd: "/", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		VM:          &specs.VM{Kernel: specs.VMKernel{Path: vm.Kernel, InitRD: vm.Initramfs, Parameters: vm.Cmdline}},
		Annotations: map[string]string{},
	}
	if vm.CPUs > 0 {
		spec.Annotations[microvm.AnnotationCPUs] = strconv.Itoa(vm.CPUs)
	}
	if len(vm.Devices) > 0 {
		d, err := json.Marshal(vm.Devices)
		if err != nil {
			return nil, errdefs.Mark(err, errdefs.ErrInvalidArgument)
		}
		spec.Annotations[microvm.AnnotationDevices] = string(d)
	}
	return spec, nil
}
