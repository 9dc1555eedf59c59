//go:build cgo

// Package nvml reads a node's GPU facts with NVIDIA's management library
// (libnvidia-ml.so.1, loaded when first asked, through NVIDIA's go-nvml).
// A node without the library or without a loaded driver is reported as a
// node without GPUs, with the reason.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/stasis-run/stasis/gpu"
)

// Source is a gpu.Source on NVML.
type Source struct {
	lib nvml.Interface
}

var _ gpu.Source = (*Source)(nil)

// New reads the system's NVML.
func New() *Source { return &Source{lib: nvml.New()} }

// NewWith reads another NVML implementation, such as go-nvml's mock
// servers.
func NewWith(lib nvml.Interface) *Source { return &Source{lib: lib} }

// errUnavailable marks an NVML that cannot be used at all on this node.
var errUnavailable = errors.New("NVML unavailable")

// session initialises NVML for one read. NVML counts its initialisations,
// so concurrent reads each get their own.
func (s *Source) session() (func(), error) {
	switch ret := s.lib.Init(); ret {
	case nvml.SUCCESS:
		return func() { _ = s.lib.Shutdown() }, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("%w: libnvidia-ml.so.1 not found (no NVIDIA driver installed, or its libraries are not on the loader path)", errUnavailable)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: the NVIDIA kernel driver is not loaded", errUnavailable)
	case nvml.ERROR_NO_PERMISSION:
		return nil, fmt.Errorf("%w: no permission to open the NVIDIA devices", errUnavailable)
	default:
		return nil, fmt.Errorf("NVML init: %s", ret.Error())
	}
}

// Info reads the driver and every GPU. A node where NVML cannot start for
// want of a driver or library is answered with Available false, not an
// error.
func (s *Source) Info(_ context.Context) (gpu.Info, error) {
	done, err := s.session()
	if errors.Is(err, errUnavailable) {
		return gpu.Info{Reason: strings.TrimPrefix(err.Error(), errUnavailable.Error()+": ")}, nil
	}
	if err != nil {
		return gpu.Info{}, err
	}
	defer done()
	info := gpu.Info{Available: true}
	var ret nvml.Return
	if info.DriverVersion, ret = s.lib.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		return info, fmt.Errorf("NVML driver version: %s", ret.Error())
	}
	if info.CUDADriverAPI, ret = s.lib.SystemGetCudaDriverVersion(); ret != nvml.SUCCESS {
		return info, fmt.Errorf("NVML CUDA driver version: %s", ret.Error())
	}
	err = s.eachDevice(func(i int, dev nvml.Device) error {
		d, err := device(i, dev)
		info.Devices = append(info.Devices, d)
		return err
	})
	if err == nil && len(info.Devices) == 0 {
		info.Available, info.Reason = false, "the NVIDIA driver is loaded but reports no GPU"
	}
	return info, err
}

// Processes lists the compute processes of every GPU, with the device
// memory each holds.
func (s *Source) Processes(_ context.Context) ([]gpu.Process, error) {
	done, err := s.session()
	if errors.Is(err, errUnavailable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer done()
	var procs []gpu.Process
	err = s.eachDevice(func(i int, dev nvml.Device) error {
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d UUID: %s", i, ret.Error())
		}
		running, ret := dev.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d (%s) compute processes: %s", i, uuid, ret.Error())
		}
		for _, p := range running {
			procs = append(procs, gpu.Process{PID: int(p.Pid), DeviceUUID: uuid, MemoryUsed: p.UsedGpuMemory})
		}
		return nil
	})
	return procs, err
}

func (s *Source) eachDevice(fn func(int, nvml.Device) error) error {
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("NVML device count: %s", ret.Error())
	}
	for i := range count {
		dev, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("NVML GPU %d: %s", i, ret.Error())
		}
		if err := fn(i, dev); err != nil {
			return err
		}
	}
	return nil
}

func device(i int, dev nvml.Device) (gpu.Device, error) {
	d := gpu.Device{Index: i}
	fail := func(what string, ret nvml.Return) (gpu.Device, error) {
		return d, fmt.Errorf("GPU %d %s: %s", i, what, ret.Error())
	}
	var ret nvml.Return
	if d.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
		return fail("UUID", ret)
	}
	if d.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return fail("name", ret)
	}
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return fail("PCI info", ret)
	}
	d.PCIDeviceID = fmt.Sprintf("0x%08x", pci.PciDeviceId)
	d.PCIBusID = cString(pci.BusId[:])
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail("memory", ret)
	}
	d.MemoryTotal, d.MemoryUsed = mem.Total, mem.Used
	if major, minor, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	// GPUs without MIG answer NOT_SUPPORTED, which means MIG is off.
	switch current, _, ret := dev.GetMigMode(); ret {
	case nvml.SUCCESS:
		d.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return fail("MIG mode", ret)
	}
	if mode, ret := dev.GetPersistenceMode(); ret == nvml.SUCCESS {
		d.PersistenceMode = mode == nvml.FEATURE_ENABLED
	}
	return d, nil
}

func cString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}
