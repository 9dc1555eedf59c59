package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// gpuActor boots a fake GPU sandbox with two CUDA processes.
func gpuActor(t *testing.T, rt *runtimetest.Runtime, id string) engine.Actor {
	t.Helper()
	dir := t.TempDir()
	if err := bundle.Save(dir, &specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/counter"}}, Root: &specs.Root{Path: "rootfs"}}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rt.Create(ctx, id, dir, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	sb, _ := rt.Sandbox(id)
	sb.CUDA = []string{"running", "running"}
	rt.Put(id, &sb)
	return engine.Actor{ID: id, Bundle: dir, GPU: true}
}

// The note that the GPU is free is named gpu-free.
func stepNames(obs *[]string) engine.Observer {
	return engine.Observer{After: func(s engine.Step) {
		if s.Name == "note" && strings.HasPrefix(s.Message, "the GPU is free, ") {
			s.Name = "gpu-free"
		}
		*obs = append(*obs, s.Name)
	}}
}

// TestGPUPathFollowsTheRuntime: with the runtime path the suspend hands
// the runtime the helper and takes no GPU step of its own, the manifest
// says so, and the resume hands the device map to the helper through the
// restore's environment and waits for the runtime to put the processes
// back; with the exec path (the default, also where the runtime could do
// it) the helper runs through exec both ways. Either way the manifest
// records the driver ABI the runtime ran the sandbox with (gpu.nvproxyABI).
func TestGPUPathFollowsTheRuntime(t *testing.T) {
	for _, c := range []struct {
		name     string
		caps     bool
		path     engine.GPUPath
		wantPath string
	}{
		{"runtime", true, engine.GPUPathRuntime, snapshot.GPUPathRuntime},
		{"default, runtime can", true, "", snapshot.GPUPathExec},
		{"exec", false, engine.GPUPathExec, snapshot.GPUPathExec},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := runtimetest.New()
			rt.Caps.CUDACheckpoint = c.caps
			rt.GPUABI = "580.159.04"
			eng := &engine.Engine{Runtime: rt, GPUPath: c.path}
			a := gpuActor(t, rt, "g1")
			var seen []string
			dir := filepath.Join(t.TempDir(), "snap")
			ctx := context.Background()
			m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: dir, Observer: stepNames(&seen)})
			if err != nil {
				t.Fatal(err)
			}
			if m.GPU == nil || m.GPU.Path != c.wantPath || m.GPU.Processes != 2 || m.GPU.NvproxyABI != "580.159.04" {
				t.Fatalf("manifest GPU %+v, want path %s, 2 CUDA processes and the runtime's ABI", m.GPU, c.wantPath)
			}
			byRuntime := c.wantPath == snapshot.GPUPathRuntime
			if (rt.LastCheckpoint.CUDACheckpointPath == bundle.HelperPath) != byRuntime || slices.Contains(seen, "gpu-suspend") == byRuntime {
				t.Fatalf("checkpoint options %+v, steps %v", rt.LastCheckpoint, seen)
			}
			// The history says when the GPU was free: after the driver's
			// checkpoint, or, where the runtime put the GPU state back after
			// its own, once the sandbox stopped.
			freed := slices.Index(seen, "gpu-free")
			if byRuntime && (freed != len(seen)-1 || slices.Index(seen, "stop") > freed) || !byRuntime && (freed < 1 || seen[freed-1] != "gpu-suspend") {
				t.Fatalf("steps %v: the GPU's release noted in the wrong place", seen)
			}
			if back, _ := snapshot.Load(dir); back.GPU.Path != c.wantPath {
				t.Fatalf("the manifest on disk says path %q", back.GPU.Path)
			}
			swap, _ := gpu.ParseDeviceMap("GPU-00112233-4455-6677-8899-aabbccddeeff=GPU-ffeeddcc-bbaa-9988-7766-554433221100")
			seen = nil
			if _, err := eng.Resume(ctx, movedTo(a, "g2"), dir, engine.ResumeOptions{DeviceMap: swap, Observer: stepNames(&seen)}); err != nil {
				t.Fatal(err)
			}
			env := strings.Join(rt.LastRestore.Env, " ")
			if strings.Contains(env, helper.DeviceMapEnv+"="+swap.String()) != byRuntime {
				t.Fatalf("restore environment %q (device map for the runtime's helper: %v)", env, byRuntime)
			}
			if sb, _ := rt.Sandbox("g2"); !slices.Equal(sb.CUDA, []string{"running", "running"}) || !slices.Contains(seen, "gpu-resume") {
				t.Fatalf("after the resume the CUDA processes are %v, steps %v", sb.CUDA, seen)
			}
		})
	}
}

// TestRuntimePathNeedsTheRuntime: forcing the runtime path on a runtime
// that cannot is refused by the plan, before anything is touched; a
// snapshot made by the runtime path is refused by a runtime that cannot put
// it back.
func TestRuntimePathNeedsTheRuntime(t *testing.T) {
	rt := runtimetest.New()
	eng := &engine.Engine{Runtime: rt, GPUPath: engine.GPUPathRuntime}
	a := gpuActor(t, rt, "g1")
	dir := filepath.Join(t.TempDir(), "snap")
	_, err := eng.Suspend(context.Background(), a, engine.SuspendOptions{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "gpu-path") || !strings.Contains(err.Error(), "--cuda-checkpoint-path") {
		t.Fatalf("the runtime path on a runtime without it: %v", err)
	}
	if sb, _ := rt.Sandbox("g1"); !slices.Equal(sb.CUDA, []string{"running", "running"}) || rt.Calls["Checkpoint"] != 0 {
		t.Fatalf("the refused suspend touched the sandbox: %+v, %d checkpoints", sb, rt.Calls["Checkpoint"])
	}
	if _, err := os.Stat(dir); err == nil {
		t.Fatal("the refused suspend made its folder")
	}
	rt.Caps.CUDACheckpoint = true
	if _, err := eng.Suspend(context.Background(), a, engine.SuspendOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	rt.Caps.CUDACheckpoint = false
	m, _ := snapshot.Load(dir)
	if _, err := eng.Compatible(context.Background(), a, m); err == nil || !strings.Contains(err.Error(), "runtime's own CUDA step") {
		t.Fatalf("a runtime-path snapshot on a runtime without it: %v", err)
	}
	if _, err := engine.ParseGPUPath("sideways"); err == nil {
		t.Fatal("an unknown GPU path was accepted")
	}
}

// TestCorruptGPUSnapshotNeverRuns: a GPU actor's snapshot is hashed beside
// its GPU step; a flipped byte fails the resume as corrupt and removes the
// new sandbox.
func TestCorruptGPUSnapshotNeverRuns(t *testing.T) {
	rt := runtimetest.New()
	eng := &engine.Engine{Runtime: rt}
	a := gpuActor(t, rt, "g1")
	dir := filepath.Join(t.TempDir(), "snap")
	ctx := context.Background()
	if _, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	pages := filepath.Join(dir, "image", "pages.img")
	data, err := os.ReadFile(pages)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(pages, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var seen []string
	_, err = eng.Resume(ctx, movedTo(a, "g2"), dir, engine.ResumeOptions{Verify: engine.VerifyWhileRestoring, Observer: stepNames(&seen)})
	if errdefs.Code(err) != "data_loss" || !slices.Contains(seen, "verify-blocks") || !slices.Contains(seen, "cleanup") {
		t.Fatalf("resume of a corrupt GPU snapshot: %v, steps %v", err, seen)
	}
	if _, ok := rt.Sandbox("g2"); ok {
		t.Fatal("the sandbox restored from a corrupt snapshot is still there")
	}
}

// TestImageOptionsFollowTheRuntime: committed zero pages are left out of
// the image by default where the runtime can, kept with KeepZeroPages, and
// --direct is used only when asked for; the manifest records the flags the
// checkpoint got.
func TestImageOptionsFollowTheRuntime(t *testing.T) {
	for _, c := range []struct {
		name          string
		caps          runtime.Capabilities
		keep, direct  bool
		wantExclude   bool
		wantDirect    bool
		wantInRecords []string
	}{
		{"default, runtime can", runtime.Capabilities{ExcludeZeroPages: true, Direct: true}, false, false, true, false, []string{"--leave-running", "--exclude-committed-zero-pages"}},
		{"zero pages kept", runtime.Capabilities{ExcludeZeroPages: true, Direct: true}, true, false, false, false, []string{"--leave-running"}},
		{"runtime cannot", runtime.Capabilities{}, false, true, false, false, []string{"--leave-running"}},
		{"direct asked for", runtime.Capabilities{ExcludeZeroPages: true, Direct: true}, false, true, true, true, []string{"--leave-running", "--direct", "--exclude-committed-zero-pages"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := runtimetest.New()
			rt.Caps = c.caps
			eng := &engine.Engine{Runtime: rt, KeepZeroPages: c.keep, DirectIO: c.direct}
			a := gpuActor(t, rt, "g1")
			m, err := eng.Suspend(context.Background(), a, engine.SuspendOptions{Dir: filepath.Join(t.TempDir(), "snap")})
			if err != nil {
				t.Fatal(err)
			}
			if got := rt.LastCheckpoint; got.ExcludeZeroPages != c.wantExclude || got.Direct != c.wantDirect {
				t.Fatalf("checkpoint options %+v, want zero pages left out %v, direct %v", got, c.wantExclude, c.wantDirect)
			}
			if !slices.Equal(m.Runtime.CheckpointFlags, c.wantInRecords) {
				t.Fatalf("manifest records checkpoint flags %q, want %q", m.Runtime.CheckpointFlags, c.wantInRecords)
			}
		})
	}
}

// TestKeptGPUSandbox: a GPU actor's suspend told to keep its sandbox leaves
// it frozen with every CUDA process checkpointed (the GPU released), and
// ResumeKept puts them back without a restore; on the runtime path, whose
// checkpoint puts the GPU state back, the sandbox is stopped instead.
func TestKeptGPUSandbox(t *testing.T) {
	keep := func() (bool, string) { return true, "the test asks" }
	ctx := context.Background()

	rt := runtimetest.New()
	eng := &engine.Engine{Runtime: rt}
	a := gpuActor(t, rt, "g1")
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: dir, Keep: keep}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := rt.Sandbox("g1"); sb.Status != runtime.StatusPaused || !slices.Equal(sb.CUDA, []string{"checkpointed", "checkpointed"}) {
		t.Fatalf("the kept sandbox: %+v; want paused, its CUDA processes checkpointed", sb)
	}
	var seen []string
	if err := eng.ResumeKept(ctx, a, dir, engine.ResumeOptions{Observer: stepNames(&seen)}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := rt.Sandbox("g1"); sb.Status != runtime.StatusRunning || !slices.Equal(sb.CUDA, []string{"running", "running"}) || rt.Calls["Restore"] != 0 {
		t.Fatalf("after the kept resume: %+v, %d restores, steps %v", sb, rt.Calls["Restore"], seen)
	}

	rt = runtimetest.New()
	rt.Caps.CUDACheckpoint = true
	eng = &engine.Engine{Runtime: rt, GPUPath: engine.GPUPathRuntime}
	a = gpuActor(t, rt, "g1")
	seen = nil
	if _, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: filepath.Join(t.TempDir(), "snap"), Keep: keep, Observer: stepNames(&seen)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Sandbox("g1"); ok || slices.Contains(seen, "freeze") {
		t.Fatalf("the runtime path kept its sandbox (steps %v); it would hold the GPU", seen)
	}
}
