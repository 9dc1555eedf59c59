package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// BenchmarkResumeVerification is what proving a local snapshot whole costs
// a resume (docs/benchmarks.md): a CPU actor holding STASIS_BENCH_MIB
// (default 1024) MiB of its own bytes is suspended once, then resumed
// again and again from that snapshot with each verification, to the
// answer of its readiness probe; "hash-only" is the floor of hashing the
// snapshot on every core with nothing else running. Run it with
//
//	go test -run '^$' -bench ResumeVerification -benchtime 5x ./engine
func BenchmarkResumeVerification(b *testing.B) {
	mib := getenvInt(b, "STASIS_BENCH_MIB", 1024)
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: testactor.RunscRoot(b), Network: "none"})
	if err != nil {
		b.Fatal(err)
	}
	eng := &engine.Engine{Runtime: rt}
	dir := b.TempDir()
	bundleDir := testactor.Bundle(b, dir, testactor.Options{Ballast: []string{"0", fmt.Sprint(mib), "0", "7"}})
	a := engine.Actor{ID: "bench-src", Bundle: bundleDir}
	ctx := context.Background()
	if err := eng.Boot(ctx, a, engine.BootOptions{Probe: engine.Probe{Command: []string{"/counter", "await", "get"}, Timeout: 5 * time.Minute}}); err != nil {
		b.Fatal(err)
	}
	snap := filepath.Join(b.TempDir(), "snap")
	m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: snap})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("snapshot of %d MiB", m.Size()>>20)
	b.Run("hash-only", func(b *testing.B) {
		for range b.N {
			if err := snapshot.VerifyContents(ctx, snap, m); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(m.Size())/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GB/s")
	})
	for _, mode := range []struct {
		name string
		v    engine.Verification
	}{{"sizes", engine.VerifySizes}, {"while-restoring", engine.VerifyWhileRestoring}, {"blocks-first", engine.VerifyBlocks}} {
		b.Run(mode.name, func(b *testing.B) {
			for i := range b.N {
				id := fmt.Sprintf("bench-%s-%d", mode.name, i)
				_, err := eng.Resume(ctx, engine.Actor{ID: id, Bundle: bundleDir}, snap, engine.ResumeOptions{Verify: mode.v, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := eng.Remove(ctx, id, id, engine.Observer{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
