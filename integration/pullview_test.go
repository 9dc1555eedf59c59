package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestKilledWhileResumingThroughAView: a resume that pulls its snapshot is
// restored through a view of the folder being pulled; stasisd killed (-9)
// after the restore, before the pull is known whole and the view closed,
// leaves a sandbox whose memory came through a view nobody serves. The
// next stasisd takes the view down, does not keep that sandbox, and puts
// the actor back where it was, its snapshot intact: the next resume pulls
// again and the actor counts on from where it was.
func TestKilledWhileResumingThroughAView(t *testing.T) {
	ctx := context.Background()
	d := newDaemon(t)
	d.start("")
	// 32 MiB of its own, so that the pull reads several stretches.
	bundle := testactor.Bundle(t, t.TempDir(), testactor.Options{Ballast: []string{"0", "32", "0", "3"}})
	if _, err := d.api.CreateTemplate(ctx, api.Template{Name: "counter", Bundle: bundle, Probe: api.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30}}); err != nil {
		t.Fatal(err)
	}
	d.run("counter", "v1")
	inst, _, _ := strings.Cut(d.execCounter("v1", "incr"), " ")
	s := d.op("Suspend", "v1")
	if s.State != api.Suspended || s.Snapshot == nil || s.Snapshot.Stored == "" {
		t.Fatalf("suspended: %+v; want it stored", s)
	}
	// The node's copy goes, so that the resume pulls the stored snapshot.
	if err := os.RemoveAll(filepath.Join(d.data, "snapshots", s.Snapshot.ID)); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d.start(service.Failpoint(service.KindResume, engine.StepArrived, false))
	if _, err := d.api.Resume(ctx, api.OpRequest{ID: "v1"}); err == nil {
		t.Fatal("the resume answered although stasisd should have died before its arrived step")
	}
	d.crashed()
	views := filepath.Join(d.data, "views")
	if left, _ := os.ReadDir(views); len(left) != 1 || !mounted(t, filepath.Join(views, left[0].Name())) {
		t.Fatalf("before the restart: views %v; want the resume's view still mounted", left)
	}
	if st, err := d.rt.State(ctx, api.SandboxID("v1")); err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("before the restart the restored sandbox is %+v, %v; want it running", st, err)
	}

	d.start("")
	a := d.inspect("v1")
	if a.State != api.Suspended || a.Operation != nil {
		t.Fatalf("after the restart: %+v; want SUSPENDED, the resume rolled back", a)
	}
	d.requireNoSandbox("v1")
	if left, _ := os.ReadDir(views); len(left) != 0 {
		t.Fatalf("after the restart views holds %v", left)
	}
	if r := d.op("Resume", "v1"); r.State != api.Running {
		t.Fatalf("resumed again: %+v", r)
	}
	if got := d.execCounter("v1", "incr"); got != inst+" 2" {
		t.Fatalf("after the second resume v1 counts %q; want %s 2", got, inst)
	}
	if left, _ := os.ReadDir(views); len(left) != 0 {
		t.Fatalf("after a resume through a view, views holds %v", left)
	}
}

// mounted tells whether dir is a mount point, from /proc/self/mountinfo.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
