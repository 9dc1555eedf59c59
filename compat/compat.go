// Package compat decides whether a node can restore a snapshot, and which
// nodes of a fleet can, best first. Each refusal is a sentence with the
// numbers behind it, so that a person or a scheduler can act on it.
//
// The rules for gVisor (docs/compatibility.md explains each):
//   - Every snapshot: same runtime and CPU architecture.
//   - Full snapshots: the same runsc build and platform; every CPU feature
//     flag of the snapshot's node (the sentry saved code paths that use
//     them); host memory available for the whole image.
//   - Full snapshots of GPU actors: the same NVIDIA driver version and the
//     same nvproxy ABI; the checkpoint API in the driver library; for each
//     GPU the actor used, a distinct GPU of the same model (PCI device id)
//     with at least the device memory the actor held there free. The result
//     carries the device map from the old GPUs to the chosen ones.
//   - The host kernel release is a policy: not required by default (gVisor's
//     sentry, not the host kernel, is the actor's kernel), or the same
//     major.minor, or the same release.
package compat

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/snapshot"
)

// KernelRule is how much of the host kernel release a restore requires.
type KernelRule string

const (
	KernelAny   KernelRule = "any"
	KernelMinor KernelRule = "minor"
	KernelExact KernelRule = "exact"
)

// ParseKernelRule reads a rule name; "" is KernelAny.
func ParseKernelRule(s string) (KernelRule, error) {
	switch r := KernelRule(s); r {
	case "":
		return KernelAny, nil
	case KernelAny, KernelMinor, KernelExact:
		return r, nil
	}
	return "", fmt.Errorf("kernel rule %q: want any, minor or exact", s)
}

// Policy holds the rules that are a choice rather than a necessity. The
// zero Policy is the default.
type Policy struct {
	Kernel KernelRule `json:"kernel,omitempty"`
	// IgnoreCPUFlags skips the CPU feature check, for fleets where the
	// runtime is told to mask features instead.
	IgnoreCPUFlags bool `json:"ignoreCpuFlags,omitempty"`
}

// Result is one node's answer for one snapshot.
type Result struct {
	Node       string   `json:"node"`
	Class      string   `json:"class"`
	Compatible bool     `json:"compatible"`
	Reasons    []string `json:"reasons,omitempty"`
	Warnings   []string `json:"warnings,omitempty"`
	// DeviceMap sends each GPU the snapshot used to the node's GPU that
	// takes its state; empty when every GPU keeps its UUID.
	DeviceMap gpu.DeviceMap `json:"deviceMap,omitempty"`
	// GPUFreeAfter is the device memory left free on the chosen GPUs
	// after the restore, and HostFreeAfter the host memory left; Place
	// ranks compatible nodes by them.
	GPUFreeAfter  uint64 `json:"gpuFreeAfterBytes"`
	HostFreeAfter uint64 `json:"hostFreeAfterBytes"`
}

// Check compares a snapshot with a node.
func Check(m *snapshot.Manifest, n fingerprint.Fingerprint, p Policy) Result {
	// A node that runs the snapshot's runtime beside its first is checked
	// as that runtime sees it.
	n, _ = n.WithRuntime(m.Runtime.Name)
	c := checker{m: m, n: n, p: p, res: Result{Node: n.Hostname, Class: n.Class()}}
	c.runtime()
	if m.Scope == snapshot.ScopeFull {
		c.fullRuntime()
		c.host()
		if m.GPU != nil {
			c.gpu()
		}
	} else if m.GPU != nil {
		c.gpuCount()
	}
	c.res.Compatible = len(c.res.Reasons) == 0
	return c.res
}

type checker struct {
	m   *snapshot.Manifest
	n   fingerprint.Fingerprint
	p   Policy
	res Result
}

func (c *checker) refuse(format string, args ...any) {
	c.res.Reasons = append(c.res.Reasons, fmt.Sprintf(format, args...))
}

func (c *checker) warn(format string, args ...any) {
	c.res.Warnings = append(c.res.Warnings, fmt.Sprintf(format, args...))
}

// taken is the snapshot's node, or nil for snapshots written before
// manifests recorded it; their checks fall back on the manifest's own
// runtime and GPU fields.
func (c *checker) taken() *fingerprint.Fingerprint { return c.m.Node }

func (c *checker) runtime() {
	if c.m.Runtime.Name != c.n.Runtime.Name {
		c.refuse("runtime %s needed, node runs %s", c.m.Runtime.Name, orNone(c.n.Runtime.Name))
	}
	if t := c.taken(); t != nil && t.Arch != c.n.Arch {
		c.refuse("CPU architecture %s needed, node is %s", t.Arch, c.n.Arch)
	}
}

func (c *checker) fullRuntime() {
	if c.m.Runtime.Version != c.n.Runtime.Version {
		c.refuse("%s build %s needed (a Full snapshot restores only into the build that took it), node has %s", c.m.Runtime.Name, c.m.Runtime.Version, orNone(c.n.Runtime.Version))
	}
	t := c.taken()
	if t == nil {
		c.warn("the snapshot records no node fingerprint (taken before Stasis recorded one): platform, CPU, kernel and GPU model were not checked")
		return
	}
	if t.Runtime.Platform != c.n.Runtime.Platform {
		c.refuse("runtime platform %s needed, node runs %s", orNone(t.Runtime.Platform), orNone(c.n.Runtime.Platform))
	}
	if g := c.m.Guest; g != nil {
		// The guest's kernel comes back with the snapshot: the host's does
		// not matter. Its memory is allocated whole.
		if have := c.n.Memory.Available; have < g.MemoryBytes {
			c.refuse("the guest's memory is %s, node has %s available (%s short)", units.Bytes(g.MemoryBytes), units.Bytes(have), units.Bytes(g.MemoryBytes-have))
		}
	} else {
		c.kernel(t.Kernel)
	}
	if !c.p.IgnoreCPUFlags {
		var missing []string
		for _, f := range t.CPU.Flags {
			if !slices.Contains(c.n.CPU.Flags, f) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			c.refuse("CPU features %s of the snapshot's node (%s) are missing on this node (%s)", strings.Join(missing, " "), t.CPU.Model, c.n.CPU.Model)
		}
	}
}

func (c *checker) kernel(taken string) {
	if taken == c.n.Kernel {
		return
	}
	switch c.p.Kernel {
	case KernelExact:
		c.refuse("kernel %s needed (policy: exact), node runs %s", taken, c.n.Kernel)
	case KernelMinor:
		if majorMinor(taken) != majorMinor(c.n.Kernel) {
			c.refuse("kernel %s.x needed (policy: minor), node runs %s", majorMinor(taken), c.n.Kernel)
			return
		}
		fallthrough
	default:
		c.warn("kernel %s differs from the snapshot's %s (allowed by policy %s)", c.n.Kernel, taken, cmp.Or(c.p.Kernel, KernelAny))
	}
}

func majorMinor(release string) string {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return release
	}
	return parts[0] + "." + parts[1]
}

// host checks that the node can hold the image in memory: a restore loads
// all of it, the GPU state included, before the GPU state goes back.
func (c *checker) host() {
	need := uint64(c.m.Size())
	have := c.n.Memory.Available
	if have < need {
		c.refuse("needs %s of host memory available for the image, node has %s (%s short)", units.Bytes(need), units.Bytes(have), units.Bytes(need-have))
		return
	}
	c.res.HostFreeAfter = have - need
}

func (c *checker) gpu() {
	g := c.m.GPU
	if g.DriverVersion == "" && len(g.Devices) == 0 {
		c.warn("the snapshot's node had no GPU facts (no NVML there), so GPU compatibility was not checked")
		return
	}
	if !c.n.GPU.Available {
		c.refuse("the snapshot holds GPU state, node has no usable GPU (%s)", orNone(c.n.GPU.Reason))
		return
	}
	// A VM's GPU is driven by the guest's own driver, which comes back
	// with the snapshot: the host's driver, ABI and CUDA library do not
	// matter, the GPU model and its free memory do.
	if c.m.Guest == nil {
		if g.DriverVersion != "" && g.DriverVersion != c.n.GPU.DriverVersion {
			c.refuse("NVIDIA driver %s needed, node has %s", g.DriverVersion, c.n.GPU.DriverVersion)
		}
		if t := c.taken(); t != nil && t.Runtime.GPUABI != c.n.Runtime.GPUABI {
			c.refuse("nvproxy driver ABI %s needed, node runs GPU sandboxes with %s", orHost(t.Runtime.GPUABI), orHost(c.n.Runtime.GPUABI))
		}
		if !c.n.CheckpointAPI.Available {
			c.refuse("the node's CUDA driver library has no checkpoint API (%s)", orNone(c.n.CheckpointAPI.Reason))
		}
	}
	if len(g.Devices) == 0 {
		c.warn("the snapshot does not say which GPUs it used; its state restores onto GPUs with the same UUIDs only")
		return
	}
	c.assign(g.Devices)
}

// assign picks, for each GPU the snapshot used (the most memory first), a
// distinct node GPU of the same model with enough free memory: the same
// UUID when it qualifies, else the one with the most free memory.
func (c *checker) assign(used []gpu.Usage) {
	used = slices.Clone(used)
	slices.SortStableFunc(used, func(a, b gpu.Usage) int { return cmp.Compare(b.MemoryUsed, a.MemoryUsed) })
	taken := map[string]bool{}
	var pairs gpu.DeviceMap
	moved := false
	for _, u := range used {
		var best *gpu.Device
		var sameModel int
		var bestFree uint64
		for i := range c.n.GPU.Devices {
			d := &c.n.GPU.Devices[i]
			// MIG splits a GPU into instances the device map cannot name.
			if d.PCIDeviceID != u.Device.PCIDeviceID || taken[d.UUID] || d.MIGEnabled {
				continue
			}
			sameModel++
			bestFree = max(bestFree, d.MemoryFree())
			if d.MemoryFree() < u.MemoryUsed {
				continue
			}
			if best == nil || d.UUID == u.Device.UUID || (best.UUID != u.Device.UUID && d.MemoryFree() > best.MemoryFree()) {
				best = d
			}
		}
		switch {
		case sameModel == 0:
			c.refuse("needs %d %s (%s), node has %d free", countModel(used, u.Device.PCIDeviceID), u.Device.Name, u.Device.PCIDeviceID, countFree(c.n.GPU.Devices, u.Device.PCIDeviceID))
			return
		case best == nil:
			c.refuse("needs %s free GPU memory on one %s, best is %s", units.Bytes(u.MemoryUsed), u.Device.Name, units.Bytes(bestFree))
			return
		}
		taken[best.UUID] = true
		c.res.GPUFreeAfter += best.MemoryFree() - u.MemoryUsed
		oldUUID, err1 := gpu.ParseUUID(u.Device.UUID)
		newUUID, err2 := gpu.ParseUUID(best.UUID)
		if err1 != nil || err2 != nil {
			c.refuse("GPU UUIDs %q and %q cannot form a device map", u.Device.UUID, best.UUID)
			return
		}
		pairs = append(pairs, gpu.DevicePair{Old: oldUUID, New: newUUID})
		moved = moved || oldUUID != newUUID
	}
	if moved {
		c.res.DeviceMap = pairs
	}
}

// gpuCount checks a Data snapshot of a GPU actor: it cold-boots, so any
// driver does, but it wants as many GPUs as the actor had.
func (c *checker) gpuCount() {
	need := max(len(c.m.GPU.Devices), 1)
	if have := len(c.n.GPU.Devices); have < need {
		c.refuse("the actor needs %d GPU(s), node has %d", need, have)
	}
}

func countModel(used []gpu.Usage, model string) int {
	n := 0
	for _, u := range used {
		if u.Device.PCIDeviceID == model {
			n++
		}
	}
	return n
}

func countFree(devices []gpu.Device, model string) int {
	n := 0
	for _, d := range devices {
		if d.PCIDeviceID == model && !d.MIGEnabled {
			n++
		}
	}
	return n
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func orHost(abi string) string {
	if abi == "" {
		return "the host driver's own"
	}
	return abi
}
