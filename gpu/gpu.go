// Package gpu describes a node's NVIDIA GPUs as facts that snapshots record
// and compatibility checks compare: models, memory, driver versions and the
// memory each process holds. It only holds the types and the Source
// interface; gpu/nvml reads the facts from NVIDIA's management library.
package gpu

import "context"

// Device is one GPU as NVML reports it.
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Name is the model, such as "NVIDIA H200".
	Name string `json:"name"`
	// PCIDeviceID is the combined device and vendor id, such as
	// "0x233510de": two GPUs with the same id are the same model.
	PCIDeviceID       string `json:"pciDeviceId"`
	PCIBusID          string `json:"pciBusId,omitempty"`
	MemoryTotal       uint64 `json:"memoryTotalBytes"`
	MemoryUsed        uint64 `json:"memoryUsedBytes"`
	ComputeCapability string `json:"computeCapability,omitempty"`
	MIGEnabled        bool   `json:"migEnabled"`
	PersistenceMode   bool   `json:"persistenceMode"`
}

// MemoryFree is the device memory not in use.
func (d Device) MemoryFree() uint64 {
	if d.MemoryUsed > d.MemoryTotal {
		return 0
	}
	return d.MemoryTotal - d.MemoryUsed
}

// Info is a node's GPUs. A node without NVIDIA GPUs, or without the NVML
// library, is a valid node: Available is false and Reason says why.
type Info struct {
	Available     bool   `json:"available"`
	Reason        string `json:"reason,omitempty"`
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDADriverAPI is the CUDA driver API version, such as 13000.
	CUDADriverAPI int      `json:"cudaDriverAPI,omitempty"`
	Devices       []Device `json:"devices,omitempty"`
}

// Device finds a device by UUID.
func (i Info) Device(uuid string) (Device, bool) {
	for _, d := range i.Devices {
		if d.UUID == uuid {
			return d, true
		}
	}
	return Device{}, false
}

// Process is the device memory one host process holds on one GPU.
type Process struct {
	PID        int    `json:"pid"`
	DeviceUUID string `json:"deviceUuid"`
	MemoryUsed uint64 `json:"memoryUsedBytes"`
}

// Source reads a node's GPU facts. Each call reads them afresh.
type Source interface {
	Info(ctx context.Context) (Info, error)
	// Processes lists every compute process on every GPU.
	Processes(ctx context.Context) ([]Process, error)
}

// Usage is the device memory a set of processes (an actor's) holds, per GPU.
type Usage struct {
	Device     Device `json:"device"`
	MemoryUsed uint64 `json:"memoryUsedBytes"`
	PIDs       []int  `json:"pids"`
}

// UsageOf sums, per GPU, the memory the given pids hold.
func UsageOf(info Info, procs []Process, pids map[int]bool) []Usage {
	var usage []Usage
	for _, d := range info.Devices {
		u := Usage{Device: d}
		for _, p := range procs {
			if p.DeviceUUID == d.UUID && pids[p.PID] {
				u.MemoryUsed += p.MemoryUsed
				u.PIDs = append(u.PIDs, p.PID)
			}
		}
		if len(u.PIDs) > 0 {
			usage = append(usage, u)
		}
	}
	return usage
}

// TotalUsed sums the memory of every Usage.
func TotalUsed(usage []Usage) uint64 {
	var n uint64
	for _, u := range usage {
		n += u.MemoryUsed
	}
	return n
}
