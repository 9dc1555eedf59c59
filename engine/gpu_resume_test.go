//go:build gpu

package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime"
)

// resumeVariant is one way of resuming the same snapshot.
type resumeVariant struct {
	name string
	load engine.MemoryLoad
	cold bool // the page cache dropped first
}

func parseVariant(t *testing.T, s string) resumeVariant {
	v := resumeVariant{name: s}
	for _, part := range strings.Split(s, "+") {
		switch {
		case part == "lazy":
			v.load = engine.MemoryLoadBackground
		case part == "eager":
			v.load = engine.MemoryLoadEager
		case part == "auto":
			v.load = engine.MemoryLoadAuto
		case part == "cold":
			v.cold = true
		default:
			t.Fatalf("variant %q: unknown part %q (want lazy, eager or auto, with +cold; or kept alone)", s, part)
		}
	}
	return v
}

// TestGPUResumeSpeed is the resume-speed benchmark (docs/benchmarks.md,
// "Resume at the hardware's speed"). For each size in STASIS_RESUME_GIB
// (default "1,8"):
//   - the floor: the driver's own restore and unlock of that much device
//     memory in a plain process, no sandbox (holder.py, cuda_e2e.py raw);
//   - at STASIS_RESUME_RAW_GIB (default 8), runsc's own flag path by hand
//     as the suspend's floor: `runsc checkpoint --cuda-checkpoint-path`
//     (helper and image in one command, nothing made durable), then
//     `runsc restore --background`, which replays the helper itself, to the
//     first GPU operation;
//   - an actor in gVisor holding it, suspended once by the engine, whose
//     snapshot is then resumed once per variant of STASIS_RESUME_VARIANTS
//     (default "lazy,eager,auto": runsc restore --background or not, or
//     the engine's choice, engine.MemoryLoadAuto; "kept" is the actor
//     suspended with its sandbox kept frozen and resumed from memory,
//     before that snapshot is taken; at 8 GiB also
//     STASIS_RESUME_COLD, default "lazy+cold,eager+cold,auto+cold", with
//     the page cache dropped first; "none" for none), each resume timed to the first GPU
//     operation and the device data verified, the sandbox then removed so
//     that the same snapshot serves the next variant.
//
// STASIS_RESUME_ZERO_GIB adds that much zeroed device memory to each actor
// (a preallocated cache, whose committed zero pages the image leaves out).
// Every resume hashes the snapshot while it restores, as stasisd's do.
func TestGPUResumeSpeed(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	floors := g.floors()
	thp := hostTHP()
	floors["thp"] = thp
	g.record("resume-floors", floors)
	variants := strings.Split(getenv("STASIS_RESUME_VARIANTS", "lazy,eager,auto"), ",")
	var cold []string // "none": no resume from a cold disk
	if c := getenv("STASIS_RESUME_COLD", "lazy+cold,eager+cold,auto+cold"); c != "none" {
		cold = strings.Split(c, ",")
	}
	for _, size := range strings.Split(getenv("STASIS_RESUME_GIB", "1,8"), ",") {
		gib, err := strconv.ParseFloat(size, 64)
		if err != nil {
			t.Fatal(err)
		}
		driver := g.driverFloor(gib)
		g.record("resume-driver-floor", map[string]any{"gib": gib, "thp": thp, "restoreS": driver["restore_s"], "unlockS": driver["unlock_s"], "checkpointS": driver["checkpoint_s"], "lockS": driver["lock_s"]})

		id := fmt.Sprintf("speed-%s", size)
		zero := getenv("STASIS_RESUME_ZERO_GIB", "0")
		a := g.startActorArgs(id, []string{"/usr/bin/env", "HOLDER_ZERO_GIB=" + zero, g.python, "/stasis-scripts/holder_server.py", size})
		g.mustAsk(a.ID, "info")
		if size == getenv("STASIS_RESUME_RAW_GIB", "8") {
			raw := g.rawFlagPath(a, gib)
			raw["thp"] = thp
			g.record("resume-raw-flag-path", raw)
		}
		dir := filepath.Join(g.work, id)
		// The workload's own copy speeds inside the sandbox, under this
		// huge page setting (pinned memory and pageable, 4 GiB each way).
		var copies map[string]any
		if res, err := g.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{g.python, "/stasis-scripts/floors.py", "--copies"}}); err != nil || res.ExitCode != 0 || json.Unmarshal(res.Stdout, &copies) != nil {
			t.Fatalf("floors.py --copies in the sandbox: %v %s %s", err, res.Stdout, res.Stderr)
		}
		if slices.Contains(variants, "kept") {
			g.resumeKept(a, gib, zero, thp, driver)
		}
		hugeBefore := hugePageCounters()
		g.takeEvents()
		start := time.Now()
		m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		if err != nil {
			t.Fatalf("%s suspend: %v", id, err)
		}
		g.record("resume-suspend", map[string]any{"gib": gib, "zeroGib": zero, "thp": thp, "sandboxCopies": copies, "hugePagesBefore": hugeBefore, "hugePagesAfter": hugePageCounters(), "suspendS": time.Since(start).Seconds(), "imageBytes": m.Size(), "steps": steps(g.takeEvents())})

		todo := variants
		if gib == 8 {
			todo = append(append([]string{}, variants...), cold...)
		}
		for i, name := range todo {
			if name == "kept" {
				continue // resumed above, before this snapshot
			}
			v := parseVariant(t, name)
			eng := g.newEngine()
			eng.MemoryLoad = v.load
			if v.cold {
				g.dropCaches()
			}
			g.takeEvents()
			start := time.Now()
			if _, err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs, Verify: engine.VerifyWhileRestoring}); err != nil {
				t.Fatalf("%s %s resume: %v", id, name, err)
			}
			resume := time.Since(start)
			touch, err := g.ask(a.ID, "touch")
			firstOp := time.Since(start)
			if err != nil {
				t.Fatalf("%s %s: first GPU operation: %v", id, name, err)
			}
			events := g.takeEvents()
			huge := hugePageCounters()
			verify, err := g.ask(a.ID, "verify")
			if err != nil || !strings.HasPrefix(verify, "OK") {
				t.Fatalf("%s %s: data after resume: %q %v", id, name, verify, err)
			}
			var gpuMessage, restoreMessage string
			for _, ev := range events {
				switch ev.Name {
				case "gpu-resume":
					gpuMessage = ev.Message
				case "restore":
					restoreMessage = ev.Message
				}
			}
			g.record("resume-variant", map[string]any{"gib": gib, "zeroGib": zero, "thp": thp, "variant": name, "hugePages": huge, "order": i + 1, "load": string(v.load), "cold": v.cold,
				"resumeS": resume.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(), "imageBytes": m.Size(), "touch": touch, "check": verify,
				"driverRestoreS": driver["restore_s"] + driver["unlock_s"], "gpuResumeMessage": gpuMessage, "restoreMessage": restoreMessage, "steps": steps(events)})
			if err := g.rt.Stop(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := g.rt.Delete(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
		}
		os.RemoveAll(dir)
	}
}

// resumeKept is the kept variant: the running actor suspended with its
// sandbox kept frozen (SuspendOptions.Keep, as stasisd's pause does while
// the node has room), then resumed from memory (ResumeKept) to its first
// GPU operation, its device data checked; the actor runs again after it.
func (g *gpuEnv) resumeKept(a engine.Actor, gib float64, zero, thp string, driver map[string]float64) {
	t := g.t
	ctx := context.Background()
	dir := filepath.Join(g.work, a.ID+"-kept")
	defer os.RemoveAll(dir)
	g.takeEvents()
	start := time.Now()
	keep := func() (bool, string) { return true, "the benchmark keeps it" }
	if _, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir, Keep: keep}); err != nil {
		t.Fatalf("%s suspend, kept: %v", a.ID, err)
	}
	suspend := time.Since(start)
	suspendSteps := steps(g.takeEvents())
	if _, frozen := suspendSteps["suspend/freeze"]; !frozen {
		t.Fatalf("%s: the suspend did not keep the sandbox: %v", a.ID, suspendSteps)
	}
	// STASIS_RESUME_STRACE has the sentry log every system call of the
	// sandbox during the resume (with STASIS_RUNSC_DEBUG's logs), which
	// scripts/gpu/strace_summary.py sums up for the window recorded here.
	trace := os.Getenv("STASIS_RESUME_STRACE") != ""
	if trace {
		g.runscDebug(a.ID, "--strace=all")
	}
	start = time.Now()
	if err := g.eng.ResumeKept(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
		t.Fatalf("%s kept resume: %v", a.ID, err)
	}
	resume := time.Since(start)
	window := map[string]any{}
	if trace {
		window = map[string]any{"straceFrom": start.UTC().Format(time.RFC3339Nano), "straceTo": time.Now().UTC().Format(time.RFC3339Nano)}
		g.runscDebug(a.ID, "--strace=off")
	}
	touch, err := g.ask(a.ID, "touch")
	firstOp := time.Since(start)
	if err != nil {
		t.Fatalf("%s kept: first GPU operation: %v", a.ID, err)
	}
	events := g.takeEvents()
	verify, err := g.ask(a.ID, "verify")
	if err != nil || !strings.HasPrefix(verify, "OK") {
		t.Fatalf("%s kept: data after resume: %q %v", a.ID, verify, err)
	}
	gpuMessage := ""
	for _, ev := range events {
		if ev.Name == "gpu-resume" {
			gpuMessage = ev.Message
		}
	}
	g.record("resume-variant", map[string]any{"gib": gib, "zeroGib": zero, "thp": thp, "variant": "kept", "order": 0, "cold": false,
		"suspendS": suspend.Seconds(), "suspendSteps": suspendSteps,
		"resumeS": resume.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(), "touch": touch, "check": verify,
		"driverRestoreS": driver["restore_s"] + driver["unlock_s"], "gpuResumeMessage": gpuMessage, "steps": steps(events), "strace": window})
}

// runscDebug runs `runsc debug FLAG ID` against the test's sandboxes.
func (g *gpuEnv) runscDebug(id, flag string) {
	args := append(g.rt.GlobalFlags(), "debug", flag, id)
	if out, err := exec.Command(g.rt.Path(), args...).CombinedOutput(); err != nil {
		g.t.Fatalf("runsc debug %s: %v: %s", flag, err, out)
	}
}

// hostTHP is the host's transparent huge page settings as the benchmark
// records them, "shmem_enabled/defrag" (node.HugePages says whether runsc
// uses huge pages under them).
func hostTHP() string {
	h, err := node.ReadHugePages(node.HugePagesDir)
	if err != nil {
		return "unknown"
	}
	return h.ShmemEnabled + "/" + h.Defrag
}

// hugePageCounters is the host's huge page use: /proc/meminfo's
// ShmemHugePages, ShmemPmdMapped and AnonHugePages (bytes), where runsc's
// sandbox memory shows when it uses them, and /proc/vmstat's thp_* counters.
func hugePageCounters() map[string]int64 {
	counters := map[string]int64{}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && (f[0] == "ShmemHugePages:" || f[0] == "ShmemPmdMapped:" || f[0] == "AnonHugePages:") {
				if kib, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					counters[strings.TrimSuffix(f[0], ":")] = kib << 10
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/vmstat"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[0], "thp_") && f[1] != "0" {
				if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					counters[f[0]] = n
				}
			}
		}
	}
	return counters
}

// rawFlagPath suspends actor a by hand through runsc's own CUDA step, as
// an operator would, and restores it the same way: the checkpoint runs the
// helper's --toggle on every CUDA process and writes the image, without
// --leave-running (so the sandbox exits) and with nothing fsynced; the
// restore replays the toggle after it returns, and the first GPU operation
// waits for it.
func (g *gpuEnv) rawFlagPath(a engine.Actor, gib float64) map[string]any {
	t := g.t
	ctx := context.Background()
	image := filepath.Join(g.work, a.ID+"-raw")
	defer os.RemoveAll(image)
	checkpoint, err := g.runscRaw("checkpoint", "--cuda-checkpoint-path", bundle.HelperPath, "--image-path", image, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The same path made durable by hand, as the engine's suspend is before
	// the sandbox stops: the image's files fsynced after the checkpoint.
	syncStart := time.Now()
	if err := fsutil.ForEachFile(image, func(_ string, f *os.File) error { return f.Sync() }); err != nil {
		t.Fatal(err)
	}
	sync := time.Since(syncStart)
	if err := g.rt.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	restore, err := g.runscRaw("restore", "--detach", "--background", "--image-path", image, "--bundle", a.Bundle, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	touch, err := g.ask(a.ID, "touch")
	firstOp := time.Since(start)
	if err != nil {
		t.Fatalf("first GPU operation after runsc's own restore: %v", err)
	}
	verify, err := g.ask(a.ID, "verify")
	if err != nil || !strings.HasPrefix(verify, "OK") {
		t.Fatalf("data after runsc's own restore: %q %v", verify, err)
	}
	var size int64
	_ = filepath.Walk(image, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			size += info.Size()
		}
		return nil
	})
	return map[string]any{"gib": gib, "checkpointS": checkpoint.Seconds(), "syncS": sync.Seconds(), "restoreS": restore.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(), "imageBytes": size, "touch": touch, "check": verify}
}

// driverFloor is the driver's own checkpoint and restore of gib GiB of
// device memory held by a plain process outside any sandbox: the floor a
// GPU resume in gVisor is compared with.
func (g *gpuEnv) driverFloor(gib float64) map[string]float64 {
	t := g.t
	t.Helper()
	holder := exec.Command(g.python, filepath.Join(g.scripts, "holder.py"), strconv.FormatFloat(gib, 'f', -1, 64))
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		fmt.Fprintln(stdin, "exit")
		_ = holder.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "READY ") {
		t.Fatalf("holder.py %v GiB did not start: %q", gib, lines.Text())
	}
	pid := strings.Fields(lines.Text())[1]
	out, err := exec.Command(g.python, filepath.Join(g.scripts, "cuda_e2e.py"), "raw", pid).Output()
	if err != nil {
		t.Fatalf("cuda_e2e.py raw %s: %v", pid, err)
	}
	var raw map[string]float64
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("cuda_e2e.py raw: %v: %s", err, out)
	}
	for _, rc := range []string{"lock_rc", "checkpoint_rc", "restore_rc", "unlock_rc"} {
		if raw[rc] != 0 {
			t.Fatalf("the driver's own cycle failed: %s", out)
		}
	}
	fmt.Fprintln(stdin, "verify")
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "OK") {
		t.Fatalf("holder.py data after the driver's own cycle: %q", lines.Text())
	}
	return raw
}
