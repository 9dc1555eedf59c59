//go:build gpu

// The GPU end-to-end test of the engine, for a machine with an NVIDIA GPU,
// PyTorch and runsc. Build it here with `go test -c -tags gpu ./engine` and
// run it there through scripts/gpu-e2e.sh, which sets:
//
//	STASIS_HELPER       the stasis-cuda binary
//	STASIS_SCRIPTS      scripts/gpu (holder_server.py, holder_client.py)
//	STASIS_NVPROXY_ABI  the driver ABI when runsc does not know the host's
//	STASIS_GPU_OUT      where results go (engine-gpu.jsonl)
//	STASIS_WORK         a folder on disk for snapshots
//	STASIS_GPU_GIB      the main actor's device memory (default 8)
//	STASIS_BENCH_GIB    the synthetic benchmark sizes (default "1,8,32")
package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/gpu/nvml"
	"github.com/stasis-run/stasis/internal/procfs"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

type gpuEnv struct {
	t       *testing.T
	rt      *gvisor.Runsc
	eng     *engine.Engine
	obs     engine.Observer
	helper  string
	scripts string
	python  string
	work    string
	out     *os.File
	mu      sync.Mutex
	events  []engine.Step
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func newGPUEnv(t *testing.T) *gpuEnv {
	helper, scripts := os.Getenv("STASIS_HELPER"), os.Getenv("STASIS_SCRIPTS")
	if helper == "" || scripts == "" {
		t.Fatal("set STASIS_HELPER and STASIS_SCRIPTS (scripts/gpu-e2e.sh does)")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	work, err := os.MkdirTemp(getenv("STASIS_WORK", ""), "stasis-gpu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: filepath.Join(work, "runsc"), Network: "none", NvproxyDriverVersion: os.Getenv("STASIS_NVPROXY_ABI"), DebugLogDir: os.Getenv("STASIS_RUNSC_DEBUG_DIR")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(filepath.Join(getenv("STASIS_GPU_OUT", "."), "engine-gpu.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	g := &gpuEnv{t: t, rt: rt, helper: helper, scripts: scripts, python: python, work: work, out: out}
	g.obs = engine.Observer{After: func(ev engine.Step) {
		g.mu.Lock()
		g.events = append(g.events, ev)
		g.mu.Unlock()
		t.Logf("event %s/%s %s %s %s", ev.Op, ev.Name, ev.Duration.Round(time.Millisecond), ev.Message, ev.Err)
	}}
	g.eng = g.newEngine()
	return g
}

// record appends one result line, so that a run cut short keeps what it had.
// newEngine is an engine like g.eng, for a test that changes one of its
// settings (an Engine is not copied once used).
func (g *gpuEnv) newEngine() *engine.Engine {
	return &engine.Engine{Runtime: g.rt, GPU: nvml.New()}
}

func (g *gpuEnv) record(kind string, fields map[string]any) {
	fields["kind"] = kind
	data, _ := json.Marshal(fields)
	g.out.Write(append(data, '\n'))
	g.t.Logf("RESULT %s", data)
}

func (g *gpuEnv) takeEvents() []engine.Step {
	g.mu.Lock()
	defer g.mu.Unlock()
	ev := g.events
	g.events = nil
	return ev
}

// startActor runs holder_server.py holding gib GiB in a GPU sandbox.
func (g *gpuEnv) startActor(id string, gib float64) engine.Actor {
	return g.startActorArgs(id, []string{g.python, "/stasis-scripts/holder_server.py", strconv.FormatFloat(gib, 'f', -1, 64)})
}

// startActorArgs runs args in a GPU sandbox with the host's /usr, /etc and
// /opt, the GPU scripts at /stasis-scripts and the given extra mounts.
func (g *gpuEnv) startActorArgs(id string, args []string, mounts ...specs.Mount) engine.Actor {
	t := g.t
	dir := filepath.Join(g.work, "bundle-"+id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	hostDirs := []string{"/usr", "/etc", "/opt"}
	if _, err := os.Stat("/usr/local/nvidia"); err == nil {
		hostDirs = append(hostDirs, "/usr/local/nvidia")
	}
	spec, err := bundle.HostSpec(dir, hostDirs, args)
	if err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, mounts...)
	spec.Process.Env = append(spec.Process.Env, "HOME=/tmp", "PYTHONUNBUFFERED=1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64", "HF_HUB_OFFLINE=1",
		"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1")
	spec.Mounts = append(spec.Mounts, specMount("/stasis-scripts", g.scripts))
	if err := bundle.PrepareGPU(spec, g.helper); err != nil {
		t.Fatal(err)
	}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	a := engine.Actor{ID: id, Bundle: dir, GPU: true, ConsoleLog: filepath.Join(dir, "console.log")}
	ctx := context.Background()
	notes := func(msg string) { g.record("note", map[string]any{"actor": id, "message": msg}) }
	if err := g.rt.Create(ctx, id, dir, runtime.CreateOptions{ConsoleLog: a.ConsoleLog, Notify: notes}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.rt.Delete(context.Background(), id) })
	if err := g.rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	return a
}

// ask runs holder_client.py in the sandbox.
func (g *gpuEnv) ask(id, cmd string) (string, error) {
	res, err := g.rt.Exec(context.Background(), id, runtime.Process{Args: []string{g.python, "/stasis-scripts/holder_client.py", cmd}})
	if err != nil {
		return "", err
	}
	reply := strings.TrimSpace(string(res.Stdout))
	if res.ExitCode != 0 {
		return reply, fmt.Errorf("holder %s: exit %d: %s %s", cmd, res.ExitCode, reply, res.Stderr)
	}
	return reply, nil
}

func (g *gpuEnv) mustAsk(id, cmd string) string {
	g.t.Helper()
	reply, err := g.ask(id, cmd)
	if err != nil {
		g.t.Fatal(err)
	}
	return reply
}

func computeApps(t *testing.T) string {
	out, err := exec.Command("nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestGPUActor(t *testing.T) {
	g := newGPUEnv(t)
	gib, _ := strconv.ParseFloat(getenv("STASIS_GPU_GIB", "8"), 64)
	ctx := context.Background()

	// The seed's failure: a plain runsc checkpoint of a sandbox whose
	// process holds a CUDA context. A second actor shows it while the main
	// one starts.
	seed := g.startActor("seed", 1)
	a := g.startActor("main", gib)
	g.mustAsk(seed.ID, "info")
	seedImage := filepath.Join(g.work, "seed-image")
	out, err := exec.Command(g.rt.Path(), append(g.rt.GlobalFlags(), "checkpoint", "--image-path", seedImage, "seed")...).CombinedOutput()
	st, stErr := g.rt.State(ctx, "seed")
	retry, retryErr := exec.Command(g.rt.Path(), append(g.rt.GlobalFlags(), "checkpoint", "--image-path", seedImage+"-2", "seed")...).CombinedOutput()
	g.record("seed", map[string]any{"checkpointErr": fmt.Sprint(err), "checkpointOutput": firstLines(string(out)), "stateAfter": st.Status, "stateErr": fmt.Sprint(stErr), "retryErr": fmt.Sprint(retryErr), "retryOutput": firstLines(string(retry))})
	if err == nil {
		t.Error("a plain runsc checkpoint of a live CUDA sandbox succeeded; the seed failure did not reproduce")
	}
	_ = g.rt.Delete(ctx, "seed")

	info := g.mustAsk(a.ID, "info")
	g.record("actor", map[string]any{"gib": gib, "info": info, "computeApps": computeApps(t)})

	for cycle := 1; cycle <= 3; cycle++ {
		dir := filepath.Join(g.work, fmt.Sprintf("snap-%d", cycle))
		start := time.Now()
		m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		suspend := time.Since(start)
		if err != nil {
			t.Fatalf("cycle %d suspend: %v", cycle, err)
		}
		apps := computeApps(t)
		if _, err := g.rt.State(ctx, a.ID); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("cycle %d: the sandbox still exists: %v", cycle, err)
		}
		if apps != "" {
			t.Errorf("cycle %d: GPU not released, nvidia-smi lists %q", cycle, apps)
		}
		size := m.Size()
		suspendEvents := g.takeEvents()
		start = time.Now()
		if _, err := g.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
			t.Fatalf("cycle %d resume: %v", cycle, err)
		}
		resume := time.Since(start)
		touch, err := g.ask(a.ID, "touch")
		firstOp := time.Since(start)
		if err != nil {
			t.Fatalf("cycle %d: first GPU operation: %v", cycle, err)
		}
		verify, err := g.ask(a.ID, "verify")
		if err != nil {
			t.Fatalf("cycle %d: data after resume: %v", cycle, err)
		}
		g.record("cycle", map[string]any{"cycle": cycle, "gib": gib, "suspendS": suspend.Seconds(), "resumeS": resume.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(),
			"imageBytes": size, "touch": touch, "verify": verify, "gpuProcesses": m.GPU.Processes, "suspendSteps": steps(suspendEvents), "resumeSteps": steps(g.takeEvents())})
		os.RemoveAll(dir)
	}

	// A checkpoint that fails after the GPU step: the image folder has no
	// room, and preflight is told otherwise so the checkpoint runs.
	tiny := filepath.Join(g.work, "tiny")
	if err := os.MkdirAll(tiny, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tiny, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(tiny, unix.MNT_DETACH)
	eng := g.newEngine()
	eng.FreeDisk = func(string) (uint64, error) { return 1 << 50, nil }
	_, err = eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: filepath.Join(tiny, "snap")})
	verify, verr := g.ask(a.ID, "verify")
	g.record("failed-checkpoint", map[string]any{"err": fmt.Sprint(err), "verifyAfter": verify, "verifyErr": fmt.Sprint(verr), "steps": steps(g.takeEvents())})
	if err == nil || !strings.Contains(err.Error(), "GPU state resumed") {
		t.Errorf("suspend into a full folder: %v; want a failure with the GPU state resumed", err)
	}
	if verr != nil {
		t.Errorf("the actor does not answer after the failed suspend: %v", verr)
	}
}

func steps(evs []engine.Step) map[string]float64 {
	m := map[string]float64{}
	for _, ev := range evs {
		if ev.Name != "note" {
			m[ev.Op+"/"+ev.Name] += ev.Duration.Seconds()
		}
	}
	return m
}

// firstLines keeps what runsc said before its stack dump.
func firstLines(s string) string {
	if i := strings.Index(s, "\ngoroutine "); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

func specMount(dst, src string) specs.Mount {
	return specs.Mount{Destination: dst, Source: src, Type: "bind", Options: []string{"bind", "ro"}}
}

// runscRaw runs one runsc command by hand, as an operator would, with the
// same flags as the engine's runtime. Its output goes to a file, not a pipe:
// a restored sandbox keeps the command's output open.
func (g *gpuEnv) runscRaw(args ...string) (time.Duration, error) {
	flags := g.rt.GlobalFlags()
	if abi := os.Getenv("STASIS_NVPROXY_ABI"); abi != "" {
		flags = append(flags, "--nvproxy-driver-version", abi)
	}
	log, err := os.CreateTemp(g.work, "runsc-*.log")
	if err != nil {
		return 0, err
	}
	defer log.Close()
	cmd := exec.Command(g.rt.Path(), append(flags, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		return time.Since(start), fmt.Errorf("runsc %s: %v: %s", strings.Join(args, " "), err, firstLines(string(out)))
	}
	return time.Since(start), nil
}

func (g *gpuEnv) timed(fn func() error) (float64, error) {
	start := time.Now()
	err := fn()
	return time.Since(start).Seconds(), err
}

// floors runs floors.py: this machine's host-device copy speeds and the
// disk's write and read speeds, measured in the same run as a benchmark.
func (g *gpuEnv) floors() map[string]any {
	g.t.Helper()
	out, err := exec.Command(g.python, filepath.Join(g.scripts, "floors.py"), g.work).Output()
	if err != nil {
		g.t.Fatalf("floors.py: %v", err)
	}
	var floors map[string]any
	if err := json.Unmarshal(out, &floors); err != nil {
		g.t.Fatal(err)
	}
	return floors
}

// timedStep is one step of a hand-run cycle.
type timedStep struct {
	name string
	fn   func() error
}

// rawCycle runs the engine's steps by hand on actor a, as an operator
// would, and times each: helper suspend, runsc checkpoint into image, stop,
// delete, the beforeRestore steps, runsc restore, helper resume, and first,
// the first operation after it.
func (g *gpuEnv) rawCycle(a engine.Actor, image string, beforeRestore []timedStep, first timedStep) map[string]float64 {
	ctx := context.Background()
	helper := func(verb string) error {
		res, err := g.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{bundle.HelperPath, verb, "--all"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("helper %s: %s", verb, res.Stderr)
		}
		return err
	}
	steps := []timedStep{
		{"gpuSuspend", func() error { return helper("suspend") }},
		{"checkpoint", func() error {
			_, err := g.runscRaw("checkpoint", "--leave-running", "--image-path", image, a.ID)
			return err
		}},
		{"stop", func() error { return g.rt.Stop(ctx, a.ID) }},
		{"delete", func() error { return g.rt.Delete(ctx, a.ID) }},
	}
	steps = append(steps, beforeRestore...)
	steps = append(steps,
		timedStep{"restore", func() error {
			_, err := g.runscRaw("restore", "--detach", "--background", "--image-path", image, "--bundle", a.Bundle, a.ID)
			return err
		}},
		timedStep{"gpuResume", func() error { return helper("resume") }},
		first)
	raw := map[string]float64{}
	for _, s := range steps {
		var err error
		if raw[s.name], err = g.timed(s.fn); err != nil {
			g.t.Fatalf("%s raw %s: %v", a.ID, s.name, err)
		}
	}
	return raw
}

// TestGPUBench is the synthetic part of the cold start against resume
// benchmark: for each size in STASIS_BENCH_GIB (1, 8 and 32 GiB), an actor
// holding that much device memory is started cold (to its first GPU
// operation), put through the raw steps by hand (helper exec + runsc
// checkpoint, runsc restore -background + helper exec + the first GPU
// operation), then through the engine's suspend and resume, and its
// snapshot saved into a store. One actor at a time, so that the largest
// has the machine's memory and disk to itself.
func TestGPUBench(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	storeMax, err := strconv.ParseFloat(getenv("STASIS_BENCH_STORE_MAX_GB", "16"), 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range strings.Split(getenv("STASIS_BENCH_GIB", "1,8,32"), ",") {
		gib, err := strconv.ParseFloat(size, 64)
		if err != nil {
			t.Fatal(err)
		}
		result := map[string]any{"gib": gib, "workload": fmt.Sprintf("synthetic-%sgib", size)}
		var a engine.Actor
		result["coldStartToFirstOpS"], err = g.timed(func() error {
			a = g.startActor("bench-"+size, gib)
			_, err := g.ask(a.ID, "touch")
			return err
		})
		if err != nil {
			t.Fatalf("%s cold start: %v", a.ID, err)
		}
		g.mustAsk(a.ID, "info")
		image := filepath.Join(g.work, a.ID+"-raw")
		raw := g.rawCycle(a, image, nil, timedStep{"firstGPUOp", func() error { _, err := g.ask(a.ID, "touch"); return err }})
		if v, err := g.ask(a.ID, "verify"); err != nil {
			t.Fatalf("%s after the raw steps: %v %s", a.ID, err, v)
		}
		os.RemoveAll(image)
		result["raw"] = raw
		result["rawSuspendS"] = raw["gpuSuspend"] + raw["checkpoint"]
		result["rawResumeToFirstOpS"] = raw["restore"] + raw["gpuResume"] + raw["firstGPUOp"]
		g.takeEvents()

		dir := filepath.Join(g.work, a.ID+"-engine")
		var m *snapshot.Manifest
		result["engineSuspendS"], err = g.timed(func() (err error) {
			m, err = g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
			return err
		})
		if err != nil {
			t.Fatalf("%s engine suspend: %v", a.ID, err)
		}
		result["imageBytes"] = m.Size()
		result["suspendSteps"] = steps(g.takeEvents())
		resumeS, err := g.timed(func() error { _, err := g.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); return err })
		if err != nil {
			t.Fatalf("%s engine resume: %v", a.ID, err)
		}
		firstOpS, err := g.timed(func() error { _, err := g.ask(a.ID, "touch"); return err })
		if err != nil {
			t.Fatal(err)
		}
		if v, err := g.ask(a.ID, "verify"); err != nil {
			t.Fatalf("%s after the engine: %v %s", a.ID, err, v)
		}
		result["engineResumeS"], result["engineResumeToFirstOpS"] = resumeS, resumeS+firstOpS
		result["resumeSteps"] = steps(g.takeEvents())
		_ = g.rt.Delete(ctx, a.ID)
		g.record("bench", result)
		// Saving into the store reads the whole image once more; past
		// STASIS_BENCH_STORE_MAX_GB it would not fit in one device call.
		if float64(m.Size()) > storeMax*1e9 {
			result["store"] = map[string]any{"skipped": fmt.Sprintf("image of %.1f GB is over STASIS_BENCH_STORE_MAX_GB=%g", float64(m.Size())/1e9, storeMax)}
		} else {
			result["store"] = g.storeSize(dir)
		}
		g.record("bench", result)
		os.RemoveAll(dir)
	}
}

// TestGPUCompatAndPlan checks #6 on the real GPU: the node's fingerprint
// through NVML, the plan's attribution of device memory to the actor's
// sandbox and its predicted host memory against the sandbox's memory after
// a real GPU suspend, and a real snapshot checked against this node and
// against edited copies of its fingerprint.
func TestGPUCompatAndPlan(t *testing.T) {
	g := newGPUEnv(t)
	gib, _ := strconv.ParseFloat(getenv("STASIS_GPU_GIB", "8"), 64)
	ctx := context.Background()
	src := nvml.New()
	n, err := node.Collector{GPU: src, Runtime: g.rt.Info(), CheckpointAPI: cuda.CheckpointAPI}.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.writeJSON("h200-node.json", n)
	if !n.GPU.Available || len(n.GPU.Devices) == 0 || !n.CheckpointAPI.Available {
		t.Fatalf("fingerprint of a GPU node: %+v", n)
	}

	a := g.startActor("plan", gib)
	g.mustAsk(a.ID, "info")
	st, err := g.rt.State(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	procs, err := src.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := g.eng.Plan(ctx, a, g.work)
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Refused(); err != nil {
		t.Errorf("plan refused: %v", err)
	}
	for _, w := range plan.Warnings {
		if strings.Contains(w, "no GPU process belongs") {
			t.Errorf("device memory not attributed to the sandbox: %s", w)
		}
	}
	if plan.GPUMemory < uint64(gib*float64(1<<30)) {
		t.Errorf("plan's GPU memory %d < the %g GiB the actor holds", plan.GPUMemory, gib)
	}

	// The prediction against the sandbox's memory once its GPU state is in
	// host memory, measured between a real GPU suspend and its resume.
	suspend, err := g.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{bundle.HelperPath, "suspend", "--all", "--json"}})
	if err != nil || suspend.ExitCode != 0 {
		t.Fatalf("GPU suspend: %v exit %d: %s", err, suspend.ExitCode, suspend.Stderr)
	}
	measured, merr := g.rt.MemoryUsage(ctx, a.ID)
	hostRSS := treeRSS(t, st.PID)
	resume, err := g.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{bundle.HelperPath, "resume", "--all", "--json"}})
	if err != nil || resume.ExitCode != 0 {
		t.Fatalf("GPU resume: %v exit %d: %s", err, resume.ExitCode, resume.Stderr)
	}
	if merr != nil {
		t.Fatal(merr)
	}
	g.mustAsk(a.ID, "verify")
	ratio := float64(plan.HostMemory) / float64(measured)
	g.record("plan", map[string]any{"gib": gib, "sandboxPID": st.PID, "nvmlProcesses": procs, "gpus": plan.GPUs, "sandboxMemoryBefore": plan.SandboxMemory,
		"gpuMemory": plan.GPUMemory, "predictedHostMemory": plan.HostMemory, "measuredSandboxMemory": measured, "measuredHostRSS": hostRSS,
		"predictedOverMeasured": ratio, "checks": plan.Checks, "warnings": plan.Warnings})
	if ratio < 0.9 || ratio > 1.1 {
		t.Errorf("predicted host memory %d is %.3f of the measured %d; want within 10%%", plan.HostMemory, ratio, measured)
	}

	// A real snapshot, checked against this node and edited copies of it.
	dir := filepath.Join(g.work, "snap-compat")
	m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	g.writeJSON("h200-snapshot-manifest.json", m)
	if m.Node == nil || len(m.GPU.Devices) == 0 {
		t.Fatalf("the manifest lacks the node or the GPUs used: %+v", m.GPU)
	}
	here, err := node.Collector{GPU: src, Runtime: g.rt.Info(), CheckpointAPI: cuda.CheckpointAPI}.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(*fingerprint.Fingerprint)
		want string
	}{
		{"this node", func(*fingerprint.Fingerprint) {}, ""},
		{"older driver", func(f *fingerprint.Fingerprint) { f.GPU.DriverVersion = "570.124.06" }, "NVIDIA driver " + here.GPU.DriverVersion + " needed, node has 570.124.06"},
		{"no GPU", func(f *fingerprint.Fingerprint) { f.GPU = gpu.Info{Reason: "edited"} }, "node has no usable GPU"},
		{"GPU full", func(f *fingerprint.Fingerprint) { f.GPU.Devices[0].MemoryUsed = f.GPU.Devices[0].MemoryTotal }, "free GPU memory on one"},
		{"other runsc", func(f *fingerprint.Fingerprint) { f.Runtime.Version = "release-20260608.0" }, "restores only into the build that took it"},
		{"other ABI", func(f *fingerprint.Fingerprint) { f.Runtime.GPUABI = "590.48.01" }, "nvproxy driver ABI"},
	}
	for _, c := range cases {
		f := here
		f.GPU.Devices = append([]gpu.Device(nil), here.GPU.Devices...)
		c.edit(&f)
		res := compat.Check(m, f, compat.Policy{})
		g.record("compat", map[string]any{"case": c.name, "compatible": res.Compatible, "reasons": res.Reasons, "warnings": res.Warnings, "deviceMap": res.DeviceMap.String()})
		switch {
		case c.want == "" && !res.Compatible:
			t.Errorf("%s: refused: %q", c.name, res.Reasons)
		case c.want != "" && (res.Compatible || !strings.Contains(strings.Join(res.Reasons, "; "), c.want)):
			t.Errorf("%s: %+v; want a refusal containing %q", c.name, res, c.want)
		}
	}
	if _, err := g.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.ask(a.ID, "verify"); err != nil {
		t.Fatalf("data after the resume: %v", err)
	}
}

func (g *gpuEnv) writeJSON(name string, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		g.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(getenv("STASIS_GPU_OUT", "."), name), append(data, '\n'), 0o644); err != nil {
		g.t.Fatal(err)
	}
}

// treeRSS sums VmRSS over the host processes of a sandbox.
func treeRSS(t *testing.T, pid int) uint64 {
	procs, err := procfs.List("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for p := range procfs.Tree(procs, pid) {
		// A process that exited meanwhile counts for nothing.
		rss, _ := procfs.StatusBytes("/proc", p, "VmRSS")
		total += rss
	}
	return total
}

// TestGPUStoreDedup is the store's dedup benchmark on real GPU actors: two
// actors of one template (holder_server.py holding STASIS_GPU_GIB, default
// 8, of the same device data, as two servers of one model hold the same
// weights), both suspended through the engine and saved into one local
// store; it records each save's time and the stored bytes against the
// logical, with the disk's write speed (floors.py) from the same run.
func TestGPUStoreDedup(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	gib, err := strconv.ParseFloat(getenv("STASIS_GPU_GIB", "8"), 64)
	if err != nil {
		t.Fatal(err)
	}
	result := map[string]any{"gib": gib}
	var dirs []string
	for _, id := range []string{"dedup-a", "dedup-b"} {
		a := g.startActor(id, gib)
		g.mustAsk(a.ID, "info")
		dir := filepath.Join(g.work, id)
		if _, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir}); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		dirs = append(dirs, dir)
	}
	repo := g.localRepo(filepath.Join(g.work, "store"))
	for i, dir := range dirs {
		m, err := snapshot.Check(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := g.timed(func() error {
			_, err := archiver.Save(ctx, repo, fmt.Sprintf("actor-%d", i), dir, archiver.Options{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		result[fmt.Sprintf("save%dS", i+1)] = s
		result[fmt.Sprintf("save%dMBps", i+1)] = float64(m.Size()) / s / 1e6
	}
	du, err := repo.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	result["logicalBytes"], result["storedBytes"], result["ratio"] = du.Logical, du.Stored, du.Dedup
	result["floors"] = g.floors()
	g.record("store-dedup", result)
	if du.Dedup < 1.5 {
		t.Errorf("two actors of one template stored at %.2fx; expected most of the second to be found in the first", du.Dedup)
	}
}

// localRepo is a new repository in a local folder at dir.
func (g *gpuEnv) localRepo(dir string) *store.Repository {
	g.t.Helper()
	be, err := local.New(dir)
	if err != nil {
		g.t.Fatal(err)
	}
	repo, err := store.Init(context.Background(), be)
	if err != nil {
		g.t.Fatal(err)
	}
	return repo
}
