// Package fingerprint is the format of a node's fingerprint: the facts a
// snapshot's restore depends on (the GPUs and their driver, the kernel, the
// CPU, the runtime build and its settings), its compatibility class and its
// scheduling labels. Snapshots record the fingerprint of the node they were
// taken on, package node collects this node's, and package compat compares
// one with another. It is a leaf: it reads nothing from the machine.
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
)

// FormatVersion is the fingerprint format this package writes and reads.
const FormatVersion = 1

// Fingerprint is what a node offers a restore.
type Fingerprint struct {
	FormatVersion int       `json:"formatVersion"`
	Hostname      string    `json:"hostname"`
	CollectedAt   time.Time `json:"collectedAt"`
	// Arch is the CPU architecture in Go's terms ("amd64").
	Arch    string       `json:"arch"`
	Kernel  string       `json:"kernel"`
	CPU     CPU          `json:"cpu"`
	Memory  Memory       `json:"memory"`
	Runtime runtime.Info `json:"runtime"`
	GPU     gpu.Info     `json:"gpu"`
	// CheckpointAPI says whether the host's CUDA driver library exports the
	// checkpoint API a GPU suspend needs.
	CheckpointAPI Support `json:"checkpointAPI"`
	// Runtimes are the node's other runtimes, beside Runtime (gVisor's):
	// those it runs, and those it cannot, with why.
	Runtimes []RuntimeOffer `json:"runtimes,omitempty"`
}

// RuntimeOffer is one more runtime of a node.
type RuntimeOffer struct {
	// Name is the name templates give it ("microvm").
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Reason says why it is not available.
	Reason  string       `json:"reason,omitempty"`
	Runtime runtime.Info `json:"runtime"`
	// Notes say what it chose on this node and why (a micro-VM's
	// accelerator and the guest agent's channel).
	Notes []string `json:"notes,omitempty"`
}

// Offer describes runtime rt, which templates call name, as a node offers
// it; with rt nil, as one it cannot run, for reason.
func Offer(name string, rt runtime.Runtime, reason string) RuntimeOffer {
	o := RuntimeOffer{Name: name}
	if rt == nil {
		o.Reason = reason
		return o
	}
	o.Available, o.Runtime = true, rt.Info()
	if n, ok := rt.(interface{ Notes() []string }); ok {
		o.Notes = n.Notes()
	}
	return o
}

// Offers says whether the node runs the runtime templates call name:
// Runtime's name, or an available offer's.
func (f Fingerprint) Offers(name string) bool {
	if name == "" || name == f.Runtime.Name {
		return true
	}
	for _, o := range f.Runtimes {
		if o.Name == name {
			return o.Available
		}
	}
	return false
}

// WithRuntime is the fingerprint as a restore into the runtime whose build
// is named runtimeName sees it: Runtime replaced by that available
// offer's. False when the node runs no such runtime (f is returned as it
// is, and a check against it names the runtime it needs).
func (f Fingerprint) WithRuntime(runtimeName string) (Fingerprint, bool) {
	if f.Runtime.Name == runtimeName {
		return f, true
	}
	for _, o := range f.Runtimes {
		if o.Available && o.Runtime.Name == runtimeName {
			f.Runtime = o.Runtime
			return f, true
		}
	}
	return f, false
}

// CPU is the processor model and the feature flags a sandbox can see.
type CPU struct {
	Vendor string   `json:"vendor"`
	Model  string   `json:"model"`
	Flags  []string `json:"flags,omitempty"`
}

// Memory is the node's host memory.
type Memory struct {
	Total     uint64 `json:"totalBytes"`
	Available uint64 `json:"availableBytes"`
}

// Support is a feature that is there, or why it is not.
type Support struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// Load reads a fingerprint file (as `stasis node info --json` writes it)
// and refuses one that is malformed, of an unknown version, or missing a
// fact that a compatibility check needs.
func Load(path string) (Fingerprint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("node fingerprint: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return f, fmt.Errorf("node fingerprint %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and validates a fingerprint.
func Parse(data []byte) (Fingerprint, error) {
	var f Fingerprint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("not a fingerprint (want the JSON of `stasis node info --json`): %w", err)
	}
	return f, f.Validate()
}

// Validate refuses a fingerprint that a check cannot rely on.
func (f Fingerprint) Validate() error {
	if f.FormatVersion != FormatVersion {
		return fmt.Errorf("fingerprint format version %d, this stasis reads version %d (collect it again with this stasis)", f.FormatVersion, FormatVersion)
	}
	var missing []string
	for name, v := range map[string]string{"hostname": f.Hostname, "arch": f.Arch, "kernel": f.Kernel, "runtime.name": f.Runtime.Name, "runtime.version": f.Runtime.Version} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if f.GPU.Available {
		if f.GPU.DriverVersion == "" {
			missing = append(missing, "gpu.driverVersion")
		}
		for i, d := range f.GPU.Devices {
			if d.UUID == "" || d.PCIDeviceID == "" || d.MemoryTotal == 0 {
				missing = append(missing, fmt.Sprintf("gpu.devices[%d] uuid, pciDeviceId or memoryTotalBytes", i))
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("fingerprint of %q lacks %s", f.Hostname, strings.Join(missing, ", "))
	}
	return nil
}

// ClassFacts are the facts two nodes must share for a Full GPU snapshot
// taken on one to restore on the other, whatever the load: the hash of
// them is the node's compatibility class. Counts and free memory are not
// among them; a scheduler asks for those separately.
func (f Fingerprint) ClassFacts() map[string]string {
	facts := map[string]string{
		"arch":             f.Arch,
		"runtime":          f.Runtime.Name,
		"runtime.version":  f.Runtime.Version,
		"runtime.platform": f.Runtime.Platform,
	}
	if f.GPU.Available {
		facts["gpu.driver"] = f.GPU.DriverVersion
		facts["gpu.abi"] = f.Runtime.GPUABI
		facts["gpu.models"] = strings.Join(f.GPUModels(), ",")
	}
	return facts
}

// Class is a short stable hash of ClassFacts: nodes with the same class can
// restore each other's snapshots, given enough free GPUs and memory.
func (f Fingerprint) Class() string {
	facts := f.ClassFacts()
	keys := make([]string, 0, len(facts))
	for k := range facts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, facts[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// GPUModels lists the distinct GPU models (PCI device ids) of the node,
// sorted.
func (f Fingerprint) GPUModels() []string {
	var models []string
	for _, d := range f.GPU.Devices {
		if !slices.Contains(models, d.PCIDeviceID) {
			models = append(models, d.PCIDeviceID)
		}
	}
	slices.Sort(models)
	return models
}
