//go:build cgo

package nvml

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/stasis-run/stasis/gpu"
)

// h200Node is NVIDIA's mock of an 8-GPU H200 server (the real NVML cannot
// run here), with two processes on GPU 1 and GPU 3 in MIG mode.
func h200Node(t *testing.T) *server.Server {
	s := dgxh200.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		var procs []nvml.ProcessInfo
		if i == 1 {
			procs = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 8 << 30}, {Pid: 200, UsedGpuMemory: 1 << 30}}
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
		if i == 3 {
			if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
		}
	}
	return s
}

func TestInfoReadsEveryGPU(t *testing.T) {
	info, err := NewWith(h200Node(t)).Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Available || info.DriverVersion != "550.54.15" || info.CUDADriverAPI != 12040 || len(info.Devices) != 8 {
		t.Fatalf("info %+v", info)
	}
	d := info.Devices[3]
	if d.Index != 3 || d.UUID == "" || d.Name != "NVIDIA H200 141GB HBM3e" || d.PCIDeviceID != "0x233310de" || d.MemoryTotal == 0 || d.ComputeCapability != "9.0" || !d.PersistenceMode {
		t.Fatalf("device 3: %+v", d)
	}
	if !d.MIGEnabled || info.Devices[0].MIGEnabled {
		t.Fatalf("MIG: device 3 %v, device 0 %v; want on, off", d.MIGEnabled, info.Devices[0].MIGEnabled)
	}
}

func TestProcessesAttributeMemory(t *testing.T) {
	src := NewWith(h200Node(t))
	ctx := context.Background()
	info, err := src.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := src.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].DeviceUUID != info.Devices[1].UUID {
		t.Fatalf("processes %+v", procs)
	}
	usage := gpu.UsageOf(info, procs, map[int]bool{100: true, 300: true})
	if len(usage) != 1 || usage[0].MemoryUsed != 8<<30 || usage[0].Device.Index != 1 || gpu.TotalUsed(usage) != 8<<30 {
		t.Fatalf("usage of pids 100 and 300: %+v", usage)
	}
}

// TestMissingLibraryIsANodeWithoutGPUs: NVML's init failing for want of
// the library or the driver is an answer, not an error.
func TestMissingLibraryIsANodeWithoutGPUs(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		s := h200Node(t)
		s.InitFunc = func() nvml.Return { return ret }
		info, err := NewWith(s).Info(context.Background())
		if err != nil {
			t.Fatalf("%v: %v", ret, err)
		}
		if info.Available || info.Reason == "" || len(info.Devices) != 0 {
			t.Fatalf("%v: %+v", ret, info)
		}
		if procs, err := NewWith(s).Processes(context.Background()); err != nil || procs != nil {
			t.Fatalf("%v: processes %v, %v", ret, procs, err)
		}
	}
	s := h200Node(t)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	if _, err := NewWith(s).Info(context.Background()); err == nil {
		t.Fatal("an unknown NVML failure was not reported")
	}
}

// TestRealLibrary runs the system's NVML: here, with no NVIDIA driver, it
// must report a node without GPUs and say why.
func TestRealLibrary(t *testing.T) {
	info, err := New().Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !info.Available && info.Reason == "" {
		t.Fatal("no GPUs and no reason")
	}
	if info.Available && len(info.Devices) == 0 {
		t.Fatal("available without devices")
	}
}
