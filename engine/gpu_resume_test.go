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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
)

// resumeVariant is one way of resuming the same snapshot.
type resumeVariant struct {
	name     string
	eager    bool
	prefault int
	cold     bool // the page cache dropped first
}

func parseVariant(t *testing.T, s string) resumeVariant {
	v := resumeVariant{name: s}
	for _, part := range strings.Split(s, "+") {
		switch {
		case part == "lazy":
		case part == "eager":
			v.eager = true
		case part == "cold":
			v.cold = true
		case strings.HasPrefix(part, "prefault"):
			n, err := strconv.Atoi(strings.TrimPrefix(part, "prefault"))
			if err != nil || n <= 0 {
				t.Fatalf("variant %q: want prefaultN with N threads", s)
			}
			v.prefault = n
		default:
			t.Fatalf("variant %q: unknown part %q (want lazy, eager, prefaultN, cold joined by +)", s, part)
		}
	}
	return v
}

// TestGPUResumeSpeed is the resume-speed benchmark (docs/benchmarks.md,
// "Resume at the hardware's speed"). For each size in STASIS_RESUME_GIB
// (default "1,8"):
//   - the floor: the driver's own restore and unlock of that much device
//     memory in a plain process, no sandbox (holder.py, cuda_e2e.py raw);
//   - an actor in gVisor holding it, suspended once by the engine, whose
//     snapshot is then resumed once per variant of STASIS_RESUME_VARIANTS
//     (default "lazy,lazy+prefault16,eager,eager+prefault16"; at 8 GiB also
//     STASIS_RESUME_COLD, default "lazy+cold,lazy+prefault16+cold", with the
//     page cache dropped first), each resume timed to the first GPU
//     operation and the device data verified, the sandbox then removed so
//     that the same snapshot serves the next variant.
//
// Every resume verifies the snapshot while it restores, as by default.
func TestGPUResumeSpeed(t *testing.T) {
	g := newGPUEnv(t)
	ctx := context.Background()
	floors := g.floors()
	g.record("resume-floors", floors)
	variants := strings.Split(getenv("STASIS_RESUME_VARIANTS", "lazy,lazy+prefault16,eager,eager+prefault16"), ",")
	cold := strings.Split(getenv("STASIS_RESUME_COLD", "lazy+cold,lazy+prefault16+cold"), ",")
	for _, size := range strings.Split(getenv("STASIS_RESUME_GIB", "1,8"), ",") {
		gib, err := strconv.ParseFloat(size, 64)
		if err != nil {
			t.Fatal(err)
		}
		driver := g.driverFloor(gib)
		g.record("resume-driver-floor", map[string]any{"gib": gib, "restoreS": driver["restore_s"], "unlockS": driver["unlock_s"], "checkpointS": driver["checkpoint_s"], "lockS": driver["lock_s"]})

		id := fmt.Sprintf("speed-%s", size)
		a := g.startActor(id, gib)
		g.mustAsk(a.ID, "info")
		dir := filepath.Join(g.work, id)
		g.takeEvents()
		start := time.Now()
		m, err := g.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: g.obs, Dir: dir})
		if err != nil {
			t.Fatalf("%s suspend: %v", id, err)
		}
		g.record("resume-suspend", map[string]any{"gib": gib, "suspendS": time.Since(start).Seconds(), "imageBytes": m.Size(), "steps": steps(g.takeEvents())})

		todo := variants
		if gib == 8 {
			todo = append(append([]string{}, variants...), cold...)
		}
		for i, name := range todo {
			v := parseVariant(t, name)
			eng := *g.eng
			eng.EagerRestore, eng.Prefault = v.eager, v.prefault
			if v.cold {
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
					t.Fatalf("drop the page cache: %v", err)
				}
			}
			g.takeEvents()
			start := time.Now()
			if err := eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: g.obs}); err != nil {
				t.Fatalf("%s %s resume: %v", id, name, err)
			}
			resume := time.Since(start)
			touch, err := g.ask(a.ID, "touch")
			firstOp := time.Since(start)
			if err != nil {
				t.Fatalf("%s %s: first GPU operation: %v", id, name, err)
			}
			events := g.takeEvents()
			verify, err := g.ask(a.ID, "verify")
			if err != nil || !strings.HasPrefix(verify, "OK") {
				t.Fatalf("%s %s: data after resume: %q %v", id, name, verify, err)
			}
			var gpuMessage string
			for _, ev := range events {
				if ev.Name == "gpu-resume" {
					gpuMessage = ev.Message
				}
			}
			g.record("resume-variant", map[string]any{"gib": gib, "variant": name, "order": i + 1, "eager": v.eager, "prefault": v.prefault, "cold": v.cold,
				"resumeS": resume.Seconds(), "resumeToFirstGPUOpS": firstOp.Seconds(), "imageBytes": m.Size(), "touch": touch, "check": verify,
				"driverRestoreS": driver["restore_s"] + driver["unlock_s"], "gpuResumeMessage": gpuMessage, "steps": steps(events)})
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
