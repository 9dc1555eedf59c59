package api

import (
	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
)

// The node's fingerprint on the wire (rpc Fingerprint): each field of the
// format docs/compatibility.md defines has its field in NodeFingerprint,
// converted here and nowhere else (TestFingerprintRoundTrip fails on a
// field that is not).

// FingerprintWire is f as NodeFingerprint.
func FingerprintWire(f NodeInfo) *stasisv1.NodeFingerprint {
	return &stasisv1.NodeFingerprint{
		FormatVersion: int32(f.FormatVersion), Hostname: f.Hostname, CollectedAt: timestamp(f.CollectedAt),
		Arch: f.Arch, Kernel: f.Kernel,
		Cpu:     &stasisv1.NodeCPU{Vendor: f.CPU.Vendor, Model: f.CPU.Model, Flags: f.CPU.Flags},
		Memory:  &stasisv1.NodeMemory{TotalBytes: f.Memory.Total, AvailableBytes: f.Memory.Available},
		Runtime: runtimeInfoWire(f.Runtime),
		Gpu: &stasisv1.NodeGPUs{Available: f.GPU.Available, Reason: f.GPU.Reason, DriverVersion: f.GPU.DriverVersion,
			CudaDriverApi: int32(f.GPU.CUDADriverAPI), Devices: wireAll(f.GPU.Devices, gpuDeviceWire)},
		CheckpointApi: &stasisv1.Support{Available: f.CheckpointAPI.Available, Reason: f.CheckpointAPI.Reason},
		Runtimes:      wireAll(f.Runtimes, runtimeOfferWire),
	}
}

// FingerprintFromWire is the fingerprint m carries.
func FingerprintFromWire(m *stasisv1.NodeFingerprint) NodeInfo {
	g := m.GetGpu()
	return NodeInfo{
		FormatVersion: int(m.GetFormatVersion()), Hostname: m.GetHostname(), CollectedAt: timeOf(m.GetCollectedAt()),
		Arch: m.GetArch(), Kernel: m.GetKernel(),
		CPU:     fingerprint.CPU{Vendor: m.GetCpu().GetVendor(), Model: m.GetCpu().GetModel(), Flags: m.GetCpu().GetFlags()},
		Memory:  fingerprint.Memory{Total: m.GetMemory().GetTotalBytes(), Available: m.GetMemory().GetAvailableBytes()},
		Runtime: runtimeInfoFromWire(m.GetRuntime()),
		GPU: gpu.Info{Available: g.GetAvailable(), Reason: g.GetReason(), DriverVersion: g.GetDriverVersion(),
			CUDADriverAPI: int(g.GetCudaDriverApi()), Devices: fromWireAll(g.GetDevices(), gpuDeviceFromWire)},
		CheckpointAPI: fingerprint.Support{Available: m.GetCheckpointApi().GetAvailable(), Reason: m.GetCheckpointApi().GetReason()},
		Runtimes:      fromWireAll(m.GetRuntimes(), runtimeOfferFromWire),
	}
}

func runtimeInfoWire(i runtime.Info) *stasisv1.RuntimeInfo {
	return &stasisv1.RuntimeInfo{Name: i.Name, Version: i.Version, Platform: i.Platform, GpuAbi: i.GPUABI}
}

func runtimeInfoFromWire(m *stasisv1.RuntimeInfo) runtime.Info {
	return runtime.Info{Name: m.GetName(), Version: m.GetVersion(), Platform: m.GetPlatform(), GPUABI: m.GetGpuAbi()}
}

func gpuDeviceWire(d gpu.Device) *stasisv1.GPUDevice {
	return &stasisv1.GPUDevice{Index: int32(d.Index), Uuid: d.UUID, Name: d.Name, PciDeviceId: d.PCIDeviceID, PciBusId: d.PCIBusID,
		MemoryTotalBytes: d.MemoryTotal, MemoryUsedBytes: d.MemoryUsed, ComputeCapability: d.ComputeCapability,
		MigEnabled: d.MIGEnabled, PersistenceMode: d.PersistenceMode}
}

func gpuDeviceFromWire(m *stasisv1.GPUDevice) gpu.Device {
	return gpu.Device{Index: int(m.GetIndex()), UUID: m.GetUuid(), Name: m.GetName(), PCIDeviceID: m.GetPciDeviceId(), PCIBusID: m.GetPciBusId(),
		MemoryTotal: m.GetMemoryTotalBytes(), MemoryUsed: m.GetMemoryUsedBytes(), ComputeCapability: m.GetComputeCapability(),
		MIGEnabled: m.GetMigEnabled(), PersistenceMode: m.GetPersistenceMode()}
}

func runtimeOfferWire(o fingerprint.RuntimeOffer) *stasisv1.RuntimeOffer {
	return &stasisv1.RuntimeOffer{Name: o.Name, Available: o.Available, Reason: o.Reason, Runtime: runtimeInfoWire(o.Runtime), Notes: o.Notes}
}

func runtimeOfferFromWire(m *stasisv1.RuntimeOffer) fingerprint.RuntimeOffer {
	return fingerprint.RuntimeOffer{Name: m.GetName(), Available: m.GetAvailable(), Reason: m.GetReason(), Runtime: runtimeInfoFromWire(m.GetRuntime()), Notes: m.GetNotes()}
}
