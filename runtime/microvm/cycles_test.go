package microvm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// TestRepeatedCycles: a VM suspended and resumed again and again, its
// device detached from each restored VM and attached to the next, keeps
// its count.
func TestRepeatedCycles(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	ctx := context.Background()
	a := f.boot("cycles", vmtest.Options{Devices: []microvm.Device{standIn}})
	for i := 1; i <= 3; i++ {
		f.counter(a.ID, "incr")
		snap := filepath.Join(t.TempDir(), fmt.Sprint("snap", i))
		if _, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: snap}); err != nil {
			t.Fatalf("suspend %d: %v", i, err)
		}
		if _, err := f.eng.Resume(ctx, a, snap, engine.ResumeOptions{Observer: f.obs}); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		if got := f.counter(a.ID, "get"); !strings.HasSuffix(got, fmt.Sprint(" ", i)) || !f.hasStandIn(a.ID) {
			t.Fatalf("after cycle %d: counter %q, stand-in listed %v", i, got, f.hasStandIn(a.ID))
		}
	}
}
