package compat

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/snapshot"
)

// recorded loads the fingerprint of the H200 machine and the manifest of a
// snapshot of an 8 GiB PyTorch actor taken there (both written by the GPU
// test TestGPUCompatAndPlan, docs/results/h200-compat-plan.jsonl).
func recorded(t *testing.T) (*snapshot.Manifest, fingerprint.Fingerprint) {
	t.Helper()
	n, err := fingerprint.Load("testdata/h200-node.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/h200-snapshot.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if m.Node == nil || m.GPU == nil || len(m.GPU.Devices) != 1 {
		t.Fatal("the recorded snapshot lacks its node or its GPU")
	}
	return m, n
}

func clone(t *testing.T, n fingerprint.Fingerprint) fingerprint.Fingerprint {
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var c fingerprint.Fingerprint
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

const otherUUID = "GPU-99999999-8888-7777-6666-555555555555"

func TestSameNodeIsCompatible(t *testing.T) {
	m, n := recorded(t)
	res := Check(m, n, Policy{})
	if !res.Compatible || len(res.Reasons) != 0 || len(res.DeviceMap) != 0 {
		t.Fatalf("%+v", res)
	}
	if res.GPUFreeAfter == 0 || res.HostFreeAfter == 0 {
		t.Fatalf("headroom not computed: %+v", res)
	}
}

// TestRefusals edits one fact of the node at a time and expects the
// refusal to name it with its numbers.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(*fingerprint.Fingerprint)
		want string
	}{
		{"driver", func(n *fingerprint.Fingerprint) { n.GPU.DriverVersion = "570.124.06" }, "NVIDIA driver 580.159.04 needed, node has 570.124.06"},
		{"runsc build", func(n *fingerprint.Fingerprint) { n.Runtime.Version = "release-20260608.0" }, "build v0.0.0-20260527191743-a81fd9dd382e needed"},
		{"runtime", func(n *fingerprint.Fingerprint) { n.Runtime.Name = "microvm" }, "runtime gvisor needed, node runs microvm"},
		{"platform", func(n *fingerprint.Fingerprint) { n.Runtime.Platform = "kvm" }, "runtime platform systrap needed, node runs kvm"},
		{"nvproxy ABI", func(n *fingerprint.Fingerprint) { n.Runtime.GPUABI = "" }, "nvproxy driver ABI 580.126.20 needed, node runs GPU sandboxes with the host driver's own"},
		{"arch", func(n *fingerprint.Fingerprint) { n.Arch = "arm64" }, "CPU architecture amd64 needed, node is arm64"},
		{"cpu flags", func(n *fingerprint.Fingerprint) {
			n.CPU.Flags = slices.DeleteFunc(n.CPU.Flags, func(f string) bool { return f == "amx_tile" || f == "avx512_fp16" })
		}, "CPU features avx512_fp16 amx_tile of the snapshot's node (Intel(R) Xeon(R) Processor) are missing"},
		{"no gpu", func(n *fingerprint.Fingerprint) { n.GPU = gpu.Info{Reason: "libnvidia-ml.so.1 not found"} }, "node has no usable GPU (libnvidia-ml.so.1 not found)"},
		{"model", func(n *fingerprint.Fingerprint) {
			n.GPU.Devices[0].PCIDeviceID = "0x233010de"
			n.GPU.Devices[0].Name = "NVIDIA H100"
		}, "needs 1 NVIDIA H200 (0x233510de), node has 0 free"},
		{"gpu memory", func(n *fingerprint.Fingerprint) { n.GPU.Devices[0].MemoryUsed = n.GPU.Devices[0].MemoryTotal - 2<<30 }, "needs 9.2 GiB free GPU memory on one NVIDIA H200, best is 2.0 GiB"},
		{"mig", func(n *fingerprint.Fingerprint) { n.GPU.Devices[0].MIGEnabled = true }, "node has 0 free"},
		{"host memory", func(n *fingerprint.Fingerprint) { n.Memory.Available = 4 << 30 }, "needs 9.0 GiB of host memory available for the image, node has 4.0 GiB (5.0 GiB short)"},
		{"checkpoint api", func(n *fingerprint.Fingerprint) {
			n.CheckpointAPI = fingerprint.Support{Reason: "cuCheckpointProcessLock missing"}
		}, "no checkpoint API (cuCheckpointProcessLock missing)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, n := recorded(t)
			c.edit(&n)
			res := Check(m, n, Policy{})
			if res.Compatible {
				t.Fatalf("compatible after editing %s: %+v", c.name, res)
			}
			if joined := strings.Join(res.Reasons, "\n"); !strings.Contains(joined, c.want) {
				t.Fatalf("reasons:\n%s\nwant one containing %q", joined, c.want)
			}
		})
	}
}

func TestEveryReasonIsGiven(t *testing.T) {
	m, n := recorded(t)
	n.GPU.DriverVersion = "570.124.06"
	n.Runtime.Platform = "ptrace"
	n.Memory.Available = 1 << 30
	if res := Check(m, n, Policy{}); len(res.Reasons) != 3 {
		t.Fatalf("want 3 reasons, got %q", res.Reasons)
	}
}

func TestTwoGPUsNeeded(t *testing.T) {
	m, n := recorded(t)
	second := m.GPU.Devices[0]
	second.Device.UUID = otherUUID
	m.GPU.Devices = append(m.GPU.Devices, second)
	res := Check(m, n, Policy{})
	if res.Compatible || !strings.Contains(strings.Join(res.Reasons, ";"), "needs 2 NVIDIA H200 (0x233510de), node has 1 free") {
		t.Fatalf("%+v", res)
	}
	// A node with two H200s takes it, each old GPU on its own.
	d := n.GPU.Devices[0]
	d.UUID, d.Index = otherUUID, 1
	n.GPU.Devices = append(n.GPU.Devices, d)
	if res := Check(m, n, Policy{}); !res.Compatible || len(res.DeviceMap) != 0 {
		t.Fatalf("two GPUs, same UUIDs: %+v", res)
	}
}

// TestDeviceMapToAnotherGPU: a node whose H200 has another UUID gets the
// snapshot with a device map from the old UUID to its own.
func TestDeviceMapToAnotherGPU(t *testing.T) {
	m, n := recorded(t)
	n.Hostname = "gpu-b"
	n.GPU.Devices[0].UUID = otherUUID
	res := Check(m, n, Policy{})
	if !res.Compatible || len(res.DeviceMap) != 1 {
		t.Fatalf("%+v", res)
	}
	if got := res.DeviceMap.String(); got != m.GPU.Devices[0].Device.UUID+"="+otherUUID {
		t.Fatalf("device map %s", got)
	}
}

func TestKernelPolicy(t *testing.T) {
	m, n := recorded(t)
	n.Kernel = "6.18.4"
	for rule, compatible := range map[KernelRule]bool{KernelAny: true, KernelMinor: true, KernelExact: false} {
		res := Check(m, n, Policy{Kernel: rule})
		if res.Compatible != compatible {
			t.Errorf("kernel 6.18.0 -> 6.18.4 under %s: compatible %v, want %v (%q)", rule, res.Compatible, compatible, res.Reasons)
		}
		if compatible && len(res.Warnings) == 0 {
			t.Errorf("kernel change under %s gave no warning", rule)
		}
	}
	n.Kernel = "6.19.0"
	if res := Check(m, n, Policy{Kernel: KernelMinor}); res.Compatible || !strings.Contains(res.Reasons[0], "kernel 6.18.x needed (policy: minor), node runs 6.19.0") {
		t.Fatalf("%+v", res)
	}
	if _, err := ParseKernelRule("loose"); err == nil {
		t.Fatal("kernel rule loose accepted")
	}
}

func TestDataSnapshotNeedsOnlyRuntimeAndGPUCount(t *testing.T) {
	m, n := recorded(t)
	m.Scope = snapshot.ScopeData
	n.Runtime.Version = "other"
	n.GPU.DriverVersion = "570.124.06"
	n.Memory.Available = 1
	if res := Check(m, n, Policy{}); !res.Compatible {
		t.Fatalf("%+v", res)
	}
	n.GPU.Devices = nil
	if res := Check(m, n, Policy{}); res.Compatible || res.Reasons[0] != "the actor needs 1 GPU(s), node has 0" {
		t.Fatalf("%+v", res)
	}
}

func TestSnapshotWithoutFingerprint(t *testing.T) {
	m, n := recorded(t)
	m.Node = nil
	res := Check(m, n, Policy{})
	if !res.Compatible || len(res.Warnings) == 0 {
		t.Fatalf("%+v", res)
	}
	n.GPU.DriverVersion = "570.124.06"
	if res := Check(m, n, Policy{}); res.Compatible {
		t.Fatalf("driver mismatch passed without a fingerprint: %+v", res)
	}
}

func TestPlaceRanks(t *testing.T) {
	m, a := recorded(t)
	a.Hostname = "gpu-a"
	busy := clone(t, a)
	busy.Hostname = "gpu-busy"
	busy.GPU.Devices[0].MemoryUsed = 100 << 30
	old := clone(t, a)
	old.Hostname = "gpu-old"
	old.GPU.DriverVersion = "570.124.06"
	empty := clone(t, a)
	empty.Hostname = "gpu-empty"
	empty.GPU.Devices[0].MemoryUsed = 0
	results := Place(m, []fingerprint.Fingerprint{old, busy, a, empty}, Policy{})
	var order []string
	for _, r := range results {
		order = append(order, r.Node)
	}
	if got := strings.Join(order, ","); got != "gpu-empty,gpu-a,gpu-busy,gpu-old" {
		t.Fatalf("order %s", got)
	}
	if results[3].Compatible || len(results[3].Reasons) == 0 {
		t.Fatalf("gpu-old: %+v", results[3])
	}
}
