package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	gpunvml "github.com/stasis-run/stasis/gpu/nvml"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestPlanSizesGPUStateAndRefusesOverLimit runs a real sandbox with a 1 GiB
// memory limit on a stand-in NVML (NVIDIA's H200 mock) that reports its
// sandbox process holding 8 GiB on GPU 0: the plan must attribute those
// 8 GiB to the actor, and the suspend must be refused with the shortfall
// before the helper is asked anything.
func TestPlanSizesGPUStateAndRefusesOverLimit(t *testing.T) {
	f := newFixture(t)
	ctl := t.TempDir()
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{FakeHelper: true, Ctl: ctl})
	spec, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	limit := int64(1 << 30)
	spec.Linux.Resources = &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	a := engine.Actor{ID: "planned", Bundle: dir, GPU: true}
	ctx := context.Background()
	if err := f.rt.Create(ctx, a.ID, dir, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.rt.Delete(context.Background(), a.ID) })
	if err := f.rt.Start(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	f.counter(a.ID, "get")
	st, err := f.rt.State(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	node := dgxh200.New()
	for i, d := range node.Devices {
		dev := d.(*server.Device)
		var procs []nvml.ProcessInfo
		if i == 0 {
			procs = []nvml.ProcessInfo{{Pid: uint32(st.PID), UsedGpuMemory: 8 << 30}, {Pid: 1, UsedGpuMemory: 3 << 30}}
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS }
		dev.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	}
	f.eng.GPU = gpunvml.NewWith(node)

	plan, err := f.eng.Plan(ctx, a, filepath.Join(t.TempDir(), "snap"))
	if err != nil {
		t.Fatal(err)
	}
	if plan.GPUMemory != 8<<30 || len(plan.GPUs) != 1 || plan.GPUs[0].Device.Index != 0 {
		t.Fatalf("GPU memory attributed to the actor: %d bytes on %+v; want 8 GiB on GPU 0 (pid 1's 3 GiB is not the actor's)", plan.GPUMemory, plan.GPUs)
	}
	if plan.SandboxMemory == 0 || plan.HostMemory != plan.SandboxMemory+8<<30 || plan.MemoryLimit != 1<<30 {
		t.Fatalf("plan %+v", plan)
	}
	failed := map[string]string{}
	for _, c := range plan.Checks {
		if !c.OK {
			failed[c.Name] = c.Detail
		}
	}
	if !strings.Contains(failed["memory-limit"], "against its limit of 1.0 GiB") || !strings.Contains(failed["memory-limit"], "short") {
		t.Fatalf("memory-limit check: %q (all failed: %v)", failed["memory-limit"], failed)
	}
	if _, hasDriver := os.Stat("/proc/driver/nvidia/version"); hasDriver != nil && failed["checkpoint-api"] == "" {
		t.Fatalf("no checkpoint-api refusal on a node without a CUDA driver: %v", failed)
	}
	// Sandbox memory in 4 KiB pages is a warning, never a refusal.
	hugeDir := t.TempDir()
	os.WriteFile(filepath.Join(hugeDir, "shmem_enabled"), []byte("always within_size advise [never] deny force\n"), 0o644)
	os.WriteFile(filepath.Join(hugeDir, "defrag"), []byte("always defer defer+madvise [madvise] never\n"), 0o644)
	f.eng.HugePagesDir = hugeDir
	if plan, err = f.eng.Plan(ctx, a, filepath.Join(t.TempDir(), "snap")); err != nil || !strings.Contains(strings.Join(plan.Warnings, "\n"), "sandbox memory in 4 KiB pages (shmem_enabled never, defrag madvise)") {
		t.Fatalf("plan with 4 KiB pages: warnings %q, %v", plan.Warnings, err)
	}

	_, err = f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(t.TempDir(), "snap")})
	if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "memory-limit") {
		t.Fatalf("suspend: %v; want a memory-limit refusal", err)
	}
	if calls, _ := os.ReadFile(filepath.Join(ctl, "calls")); len(calls) != 0 {
		t.Fatalf("the helper was called (%q) although preflight refused", calls)
	}
	f.requireRunning(a.ID)
}

// TestResumeRefusesAnotherPlatform edits the snapshot's recorded node as if
// it had been taken on the KVM platform: the resume is refused with the
// reason before any sandbox exists.
func TestResumeRefusesAnotherPlatform(t *testing.T) {
	f := newFixture(t)
	a := f.start("platform", testactor.Options{})
	f.incr(a.ID, 1)
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if m.Node == nil || m.Node.Runtime.Platform != "systrap" || m.Node.Kernel == "" {
		t.Fatalf("manifest node %+v", m.Node)
	}
	m.Node.Runtime.Platform = "kvm"
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs})
	if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "runtime platform kvm needed, node runs systrap") {
		t.Fatalf("got %v; want a refusal naming the platform", err)
	}
	f.requireGone(a.ID)
}
