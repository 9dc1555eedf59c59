package microvm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// BenchmarkCycle times a micro-VM actor's life on this machine's QEMU
// (TCG here): boot to the workload's first answer, the engine's suspend
// (agent step, device detach, migration stream to a file, commit, stop)
// and its resume to the workload's first answer (verify, restore, device
// attach, agent step). STASIS_VM_MIB sets the guest memory (192 MiB), and
// STASIS_VM_HOLD_MIB has the workload fill that much of it with its own
// bytes (memholder) before it answers.
//
//	STASIS_VM_MIB=1024 STASIS_VM_HOLD_MIB=512 go test -run '^$' -bench Cycle -benchtime 5x ./runtime/microvm
func BenchmarkCycle(b *testing.B) {
	mib, hold := int64(192), "0"
	if v := os.Getenv("STASIS_VM_MIB"); v != "" {
		if _, err := fmt.Sscan(v, &mib); err != nil {
			b.Fatal(err)
		}
	}
	var ballast []string
	if v := os.Getenv("STASIS_VM_HOLD_MIB"); v != "" {
		hold = v
		ballast = []string{"0", hold, "0", "1"}
	}
	root, err := os.MkdirTemp("", "vm")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	ctx := context.Background()
	rt, err := microvm.New(ctx, microvm.Config{Root: root})
	if err != nil {
		b.Fatal(err)
	}
	eng := &engine.Engine{Runtime: rt}
	dir := vmtest.Bundle(b, b.TempDir(), vmtest.Options{Devices: []microvm.Device{standIn}, MemoryMiB: mib, Ballast: ballast})
	var boot, suspend, resume time.Duration
	var image int64
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench%d", i)
		a := engine.Actor{ID: id, Bundle: dir, GPU: true}
		answer := func() {
			if res, err := rt.Exec(ctx, id, runtime.Process{Args: []string{"/counter", "await", "incr"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("counter: %v %s", err, res.Stderr)
			}
		}
		start := time.Now()
		if err := rt.Create(ctx, id, dir, runtime.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := rt.Start(ctx, id); err != nil {
			b.Fatal(err)
		}
		answer()
		boot += time.Since(start)

		snap := filepath.Join(b.TempDir(), "snap")
		start = time.Now()
		m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: snap})
		if err != nil {
			b.Fatal(err)
		}
		suspend += time.Since(start)
		image += m.Size()

		start = time.Now()
		if _, err := eng.Resume(ctx, a, snap, engine.ResumeOptions{Verify: engine.VerifySizes}); err != nil {
			b.Fatal(err)
		}
		answer()
		resume += time.Since(start)
		if err := rt.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(snap)
	}
	n := float64(b.N)
	b.ReportMetric(boot.Seconds()/n, "boot-s")
	b.ReportMetric(suspend.Seconds()/n, "suspend-s")
	b.ReportMetric(resume.Seconds()/n, "resume-s")
	b.ReportMetric(float64(image)/n/1e6, "image-MB")
}
