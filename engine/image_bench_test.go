package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// BenchmarkImageOptions measures the runsc image options the engine can
// turn on (docs/benchmarks.md): a CPU actor holding STASIS_BENCH_OWN_MIB
// (default 256) MiB of its own bytes and STASIS_BENCH_ZERO_MIB (default
// 1024) MiB of touched zero pages (a model server's freshly zeroed arenas)
// is booted, suspended and resumed once per iteration: with zero pages
// kept (KeepZeroPages), with the default (runsc's
// --exclude-committed-zero-pages) and with --direct besides. Boot and
// removal are outside the timing; the metrics are the suspend and the
// resume (to the readiness probe's answer) and the image's size. Run it with
//
//	go test -run '^$' -bench ImageOptions -benchtime 3x ./engine
func BenchmarkImageOptions(b *testing.B) {
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: testactor.RunscRoot(b), Network: "none"})
	if err != nil {
		b.Fatal(err)
	}
	caps := rt.Capabilities()
	dir := b.TempDir()
	own, zero := getenvInt(b, "STASIS_BENCH_OWN_MIB", 256), getenvInt(b, "STASIS_BENCH_ZERO_MIB", 1024)
	bundleDir := testactor.Bundle(b, dir, testactor.Options{Ballast: []string{"0", fmt.Sprint(own), fmt.Sprint(zero), "7"}})
	probe := engine.Probe{Command: []string{"/counter", "await", "get"}, Timeout: 5 * time.Minute}
	for _, mode := range []struct {
		name     string
		engine   *engine.Engine
		possible bool
	}{
		{"keep-zero-pages", &engine.Engine{Runtime: rt, KeepZeroPages: true}, true},
		{"exclude-zero-pages", &engine.Engine{Runtime: rt}, caps.ExcludeZeroPages},
		{"exclude-zero-pages+direct", &engine.Engine{Runtime: rt, DirectIO: true}, caps.ExcludeZeroPages && caps.Direct},
	} {
		b.Run(mode.name, func(b *testing.B) {
			if !mode.possible {
				b.Skipf("%s %s has no such option", rt.Info().Name, rt.Info().Version)
			}
			benchCycles(b, mode.engine, bundleDir, "image-"+mode.name, probe)
		})
	}
}

// benchCycles boots an actor of bundleDir, suspends it and resumes it to
// its probe's answer b.N times, each under a new id with prefix, and
// reports the mean suspend, resume, the suspend's checkpoint and commit
// steps and the image's size. Boot and removal are outside the timing.
func benchCycles(b *testing.B, eng *engine.Engine, bundleDir, prefix string, probe engine.Probe) {
	ctx := context.Background()
	var suspend, resume time.Duration
	var image int64
	steps := map[string]time.Duration{}
	obs := engine.Observer{After: func(s engine.Step) { steps[s.Name] += s.Duration }}
	for i := range b.N {
		b.StopTimer()
		a := engine.Actor{ID: fmt.Sprintf("%s-%d", prefix, i), Bundle: bundleDir}
		if err := eng.Boot(ctx, a, engine.BootOptions{Probe: probe}); err != nil {
			b.Fatal(err)
		}
		snap := filepath.Join(b.TempDir(), "snap")
		b.StartTimer()
		start := time.Now()
		m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: snap, Observer: obs})
		if err != nil {
			b.Fatal(err)
		}
		suspend += time.Since(start)
		image += m.Size()
		start = time.Now()
		if _, err := eng.Resume(ctx, a, snap, engine.ResumeOptions{Probe: probe}); err != nil {
			b.Fatal(err)
		}
		resume += time.Since(start)
		b.StopTimer()
		if err := eng.Remove(ctx, a.ID, a.ID, engine.Observer{}); err != nil {
			b.Fatal(err)
		}
		if err := os.RemoveAll(snap); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(suspend.Seconds()/n, "suspend-s")
	b.ReportMetric(resume.Seconds()/n, "resume-s")
	b.ReportMetric(steps["checkpoint"].Seconds()/n, "checkpoint-s")
	b.ReportMetric(steps["commit"].Seconds()/n, "commit-s")
	b.ReportMetric(float64(image)/n/(1<<20), "image-MiB")
}

func getenvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}
