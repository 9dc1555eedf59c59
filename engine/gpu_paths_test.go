//go:build gpu

package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
)

// TestGPUPaths measures the two ways a GPU actor's state moves (the
// gVisor issue, docs/benchmarks.md): through the helper run by exec, and
// through runsc's own --cuda-checkpoint-path, which runs stasis-cuda
// --toggle itself. For each path in STASIS_GPU_PATHS (default
// "exec,runtime") and each size in STASIS_PATH_GIB (default "1,8"), an
// actor is started and taken through cycles of suspend and resume, its
// device data verified after each: at 8 GiB, four cycles without --direct
// (resumes alternately verified by size only and by hashing while
// restoring, for the cost of the hashing) and one with; at other sizes one
// of each.
func TestGPUPaths(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	for _, path := range strings.Split(getenv("STASIS_GPU_PATHS", "exec,runtime"), ",") {
		for _, size := range strings.Split(getenv("STASIS_PATH_GIB", "1,8"), ",") {
			gib, err := strconv.ParseFloat(size, 64)
			if err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("path-%s-%s", path, size)
			a := g.startActor(id, gib)
			g.mustAsk(a.ID, "info")
			eng := g.newEngine()
			if eng.GPUPath, err = engine.ParseGPUPath(path); err != nil {
				t.Fatal(err)
			}
			plan := []struct {
				direct bool
				verify engine.Verification
			}{{false, engine.VerifySizes}, {true, engine.VerifyWhileRestoring}}
			if gib >= 8 {
				plan = []struct {
					direct bool
					verify engine.Verification
				}{{false, engine.VerifySizes}, {false, engine.VerifyWhileRestoring}, {false, engine.VerifySizes}, {false, engine.VerifyWhileRestoring}, {true, engine.VerifyWhileRestoring}}
			}
			for cycle, c := range plan {
				eng.DirectIO = c.direct
				dir := filepath.Join(g.work, fmt.Sprintf("%s-%d", id, cycle))
				g.takeEvents()
				start := time.Now()
				m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
				suspend := time.Since(start)
				if err != nil {
					t.Fatalf("%s cycle %d suspend: %v", id, cycle, err)
				}
				suspendSteps := steps(g.takeEvents())
				start = time.Now()
				if _, err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs, Verify: c.verify}); err != nil {
					t.Fatalf("%s cycle %d resume: %v", id, cycle, err)
				}
				resume := time.Since(start)
				touch, err := g.ask(a.ID, "touch")
				firstOp := time.Since(start)
				if err != nil {
					t.Fatalf("%s cycle %d: first GPU operation: %v", id, cycle, err)
				}
				verify, err := g.ask(a.ID, "verify")
				if err != nil || !strings.HasPrefix(verify, "OK") {
					t.Fatalf("%s cycle %d: data after resume: %q %v", id, cycle, verify, err)
				}
				g.record("path-cycle", map[string]any{"path": m.GPU.Path, "gib": gib, "cycle": cycle + 1, "direct": c.direct, "verify": verifyName(c.verify),
					"suspendS": suspend.Seconds(), "resumeS": resume.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(), "imageBytes": m.Size(),
					"touch": touch, "check": verify, "suspendSteps": suspendSteps, "resumeSteps": steps(g.takeEvents())})
				os.RemoveAll(dir)
			}
			_ = g.rt.Delete(ctx, a.ID)
		}
	}
}

func verifyName(v engine.Verification) string {
	return map[engine.Verification]string{engine.VerifyBlocks: "blocks", engine.VerifyWhileRestoring: "while-restoring", engine.VerifySizes: "sizes"}[v]
}

// TestGPURuntimePathDeviceMap: a snapshot made by runsc's own CUDA step is
// restored with a device map (on one GPU, the identity: it proves the
// mechanism), which runsc does not pass; stasis-cuda takes it from the
// restore's environment and says so in runsc's debug log.
func TestGPURuntimePathDeviceMap(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	a := g.startActor("devmap", 1)
	g.mustAsk(a.ID, "info")
	eng := g.newEngine()
	eng.GPUPath = engine.GPUPathRuntime
	dir := filepath.Join(g.work, "devmap")
	m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, u := range m.GPU.Devices {
		pairs = append(pairs, u.Device.UUID+"="+u.Device.UUID)
	}
	identity, err := gpu.ParseDeviceMap(strings.Join(pairs, ","))
	if err != nil || len(identity) == 0 {
		t.Fatalf("device map from %+v: %v", m.GPU.Devices, err)
	}
	logs := filepath.Join(g.work, "devmap-debug")
	cfg := gvisor.Config{Root: g.rt.Root(), Network: "none", NvproxyDriverVersion: os.Getenv("STASIS_NVPROXY_ABI"), DebugLogDir: logs}
	debug, err := gvisor.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eng.Runtime = debug
	start := time.Now()
	if _, err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs, DeviceMap: identity}); err != nil {
		t.Fatal(err)
	}
	resume := time.Since(start)
	verify, err := g.ask(a.ID, "verify")
	out, _ := exec.Command("grep", "-rh", "with device map", logs).Output()
	g.record("runtime-path-device-map", map[string]any{"deviceMap": identity.String(), "resumeS": resume.Seconds(), "check": verify, "helperSaid": strings.TrimSpace(string(out)), "steps": steps(g.takeEvents())})
	if err != nil || !strings.HasPrefix(verify, "OK") {
		t.Fatalf("data after the restore with a device map: %q %v", verify, err)
	}
	if !strings.Contains(string(out), "with device map "+identity.String()) {
		t.Fatalf("runsc's debug log does not show stasis-cuda applying the map %s:\n%s", identity, out)
	}
}

// TestGPUCudaSequential: runsc's CUDA step on two CUDA processes of one
// actor, all at once and one at a time, both processes' data verified.
func TestGPUCudaSequential(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	gib := getenv("STASIS_TWO_GIB", "2")
	script := fmt.Sprintf("%[1]s /stasis-scripts/holder_server.py %[2]s /tmp/h1.sock & exec %[1]s /stasis-scripts/holder_server.py %[2]s /tmp/h2.sock", g.python, gib)
	a := g.startActorArgs("two", []string{"/bin/sh", "-c", script})
	ask := func(cmd, sock string) (string, error) {
		res, err := g.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{g.python, "/stasis-scripts/holder_client.py", cmd, sock}})
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(res.Stdout)), nil
	}
	for _, sock := range []string{"/tmp/h1.sock", "/tmp/h2.sock"} {
		if _, err := ask("info", sock); err != nil {
			t.Fatal(err)
		}
	}
	for _, sequential := range []bool{false, true} {
		eng := g.newEngine()
		eng.GPUPath, eng.CUDASequential = engine.GPUPathRuntime, sequential
		dir := filepath.Join(g.work, fmt.Sprintf("two-%v", sequential))
		g.takeEvents()
		start := time.Now()
		m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		suspend := time.Since(start)
		if err != nil {
			t.Fatalf("sequential %v: %v", sequential, err)
		}
		suspendSteps := steps(g.takeEvents())
		start = time.Now()
		if _, err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
			t.Fatalf("sequential %v: %v", sequential, err)
		}
		resume := time.Since(start)
		var checks []string
		for _, sock := range []string{"/tmp/h1.sock", "/tmp/h2.sock"} {
			v, err := ask("verify", sock)
			if err != nil || !strings.HasPrefix(v, "OK") {
				t.Fatalf("sequential %v: %s after the resume: %q %v", sequential, sock, v, err)
			}
			checks = append(checks, v)
		}
		g.record("cuda-sequential", map[string]any{"sequential": sequential, "gibEach": gib, "processes": m.GPU.Processes, "suspendS": suspend.Seconds(), "resumeS": resume.Seconds(),
			"checks": checks, "suspendSteps": suspendSteps, "resumeSteps": steps(g.takeEvents())})
		os.RemoveAll(dir)
	}
}

// TestGPUSeedFailure: what the runsc in use does when a sandbox holding a
// live CUDA context is checkpointed with no CUDA step at all, with and
// without --leave-running: does the checkpoint fail, does the sandbox
// survive, is its device data intact.
func TestGPUSeedFailure(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	for _, leave := range []bool{true, false} {
		id := fmt.Sprintf("seed-%v", leave)
		a := g.startActor(id, 1)
		g.mustAsk(a.ID, "info")
		args := append(g.rt.GlobalFlags(), "checkpoint", "--image-path", filepath.Join(g.work, id+"-image"))
		if leave {
			args = append(args, "--leave-running")
		}
		out, err := exec.Command(g.rt.Path(), append(args, id)...).CombinedOutput()
		st, stErr := g.rt.State(ctx, id)
		verify, verr := g.ask(id, "verify")
		g.record("seed-failure", map[string]any{"runsc": g.rt.Features().Version, "leaveRunning": leave, "checkpointErr": fmt.Sprint(err), "checkpointOutput": firstLines(string(out)),
			"stateAfter": st.Status, "stateErr": fmt.Sprint(stErr), "check": verify, "checkErr": fmt.Sprint(verr)})
		if err == nil {
			t.Errorf("leave-running %v: a checkpoint of a live CUDA sandbox without a CUDA step succeeded", leave)
		}
		if leave && (verr != nil || !strings.HasPrefix(verify, "OK")) {
			t.Errorf("with --leave-running the sandbox did not survive the failed checkpoint intact: %s %q %v", st.Status, verify, verr)
		}
		_ = g.rt.Delete(ctx, id)
	}
}

// TestGPUZeroPages: an actor holding STASIS_ZERO_GIB (default 4) GiB of
// patterned device memory and as much again of zeroed device memory (a
// preallocated cache) is suspended and resumed with committed zero pages
// kept in the image and left out of it (runsc's
// --exclude-committed-zero-pages, the default), twice each; after every
// resume the pattern and the zeros are checked.
func TestGPUZeroPages(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	gib := getenv("STASIS_ZERO_GIB", "4")
	a := g.startActorArgs("zero-pages", []string{"/usr/bin/env", "HOLDER_ZERO_GIB=" + gib, g.python, "/stasis-scripts/holder_server.py", gib})
	g.mustAsk(a.ID, "info")
	if !g.rt.Capabilities().ExcludeZeroPages {
		t.Fatalf("runsc %s cannot leave zero pages out", g.rt.Info().Version)
	}
	for cycle, keep := range []bool{true, false, true, false} {
		eng := g.newEngine()
		eng.KeepZeroPages = keep
		dir := filepath.Join(g.work, fmt.Sprintf("zero-pages-%d", cycle))
		g.takeEvents()
		start := time.Now()
		m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		suspend := time.Since(start)
		if err != nil {
			t.Fatalf("cycle %d suspend: %v", cycle, err)
		}
		suspendSteps := steps(g.takeEvents())
		start = time.Now()
		if _, err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
			t.Fatalf("cycle %d resume: %v", cycle, err)
		}
		resume := time.Since(start)
		verify, err := g.ask(a.ID, "verify")
		if err != nil || !strings.HasPrefix(verify, "OK") {
			t.Fatalf("cycle %d: data after resume: %q %v", cycle, verify, err)
		}
		g.record("zero-pages", map[string]any{"gib": gib, "zeroGib": gib, "cycle": cycle + 1, "keepZeroPages": keep, "flags": m.Runtime.CheckpointFlags,
			"suspendS": suspend.Seconds(), "resumeS": resume.Seconds(), "imageBytes": m.Size(), "check": verify,
			"suspendSteps": suspendSteps, "resumeSteps": steps(g.takeEvents())})
		os.RemoveAll(dir)
	}
}
