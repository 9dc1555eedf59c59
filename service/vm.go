package service

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime/microvm"
)

// validateVM checks what a micro-VM template adds: its guest (a bundle's
// vm section, or the template's vm and args), its devices, and that it
// asks for nothing a VM does not have.
func (s *Service) validateVM(t *api.Template) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: micro-VM template %s: %s", ErrInvalid, t.Name, fmt.Sprintf(format, args...))
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
		if v := spec.Annotations[microvm.AnnotationDevices]; v != "" {
			var d []api.Device
			_ = json.Unmarshal([]byte(v), &d) // checked by loadBundle
			devices = len(d)
		}
	} else {
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
			if err := s.cfg.HostPaths.allows("guest "+what[len("vm."):], path, false); err != nil {
				return fmt.Errorf("template %s: %w", t.Name, err)
			}
		}
		if err := checkVMDevices(vm.Devices); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
		devices = len(vm.Devices)
	}
	if t.GPUs > devices {
		return refuse("gpus %d, and the VM gets %d devices: a micro-VM's GPU is passed through as a device (driver vfio-pci, props host)", t.GPUs, devices)
	}
	return nil
}

// vmDrivers are the device drivers a micro-VM template may name: a GPU
// passed through, and the stand-ins the tests detach and attach where a
// GPU would be (without properties neither reaches anything on the host).
// Any other QEMU device could reach the host (a file, a socket, a
// network), so it is refused.
var vmDrivers = map[string]bool{"vfio-pci": true, "virtio-rng-pci": true, "virtio-serial-pci": true}

var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

var deviceID = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// checkVMDevices refuses devices a template may not give a VM.
func checkVMDevices(devices []api.Device) error {
	seen := map[string]bool{}
	for _, d := range devices {
		if !deviceID.MatchString(d.ID) || seen[d.ID] {
			return fmt.Errorf("%w: device id %q: want a unique lowercase name of up to 32 letters, digits, '-' or '_'", ErrInvalid, d.ID)
		}
		seen[d.ID] = true
		if !vmDrivers[d.Driver] {
			return fmt.Errorf("%w: device %s: driver %q: a micro-VM template may give vfio-pci (a GPU passed through), or virtio-rng-pci or virtio-serial-pci (stand-ins)", ErrForbidden, d.ID, d.Driver)
		}
		for k, v := range d.Props {
			if d.Driver != "vfio-pci" || k != "host" || !pciAddress.MatchString(v) {
				return fmt.Errorf("%w: device %s: property %s=%q: the only property is vfio-pci's host, a PCI address such as 0000:3b:00.0", ErrForbidden, d.ID, k, v)
			}
		}
		if d.Driver == "vfio-pci" && d.Props["host"] == "" {
			return fmt.Errorf("%w: device %s: vfio-pci needs props.host, the GPU's PCI address such as 0000:3b:00.0", ErrInvalid, d.ID)
		}
	}
	return nil
}

// vmSpec is the OCI spec of a micro-VM template without a bundle.
func (s *Service) vmSpec(t api.Template) (*specs.Spec, error) {
	vm := t.VM
	for what, path := range map[string]string{"kernel": vm.Kernel, "initramfs": vm.Initramfs} {
		if err := s.cfg.HostPaths.allows("guest "+what, path, false); err != nil {
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

// bundlePath is a path a bundle's spec gives, taken from the bundle's
// folder when relative.
func bundlePath(bundleDir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(bundleDir, p)
}
