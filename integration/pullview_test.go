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
	"github.com/stasis-run/stasis/snapshot"
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
	inst, _ := storedCounter(t, d)
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

// TestKilledWhileWritingThePulledCopy: stasisd killed once a resume
// through a view has arrived, while the memory image it held in memory is
// being written into the node's copy, leaves that copy without its
// manifest (the kill took the image with it). The next stasisd keeps the
// running actor, removes the incomplete copy rather than leave it on the
// disk, says so in the actor's history, and a later start from the same
// stored snapshot pulls it again.
func TestKilledWhileWritingThePulledCopy(t *testing.T) {
	ctx := context.Background()
	d := newDaemon(t)
	d.start("")
	inst, snap := storedCounter(t, d)
	copyDir := filepath.Join(d.data, "snapshots", snap.ID)
	d.stop()
	d.start(service.Failpoint(service.KindResume, engine.StepArrived, true))
	if _, err := d.api.Resume(ctx, api.OpRequest{ID: "v1"}); err == nil {
		t.Fatal("the resume answered although stasisd should have died after its arrived step")
	}
	d.crashed()
	// The image of this small actor may have been written before the
	// kill; without its manifest the copy is what a kill in the middle of
	// the writing leaves.
	if err := os.Remove(filepath.Join(copyDir, snapshot.ManifestName)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if _, err := os.Stat(copyDir); err != nil {
		t.Fatalf("before the restart the pulled copy is not there: %v", err)
	}

	d.start("")
	if a := d.inspect("v1"); a.State != api.Running {
		t.Fatalf("after the restart: %+v; want v1 RUNNING, its resume finished", a)
	}
	if got := d.execCounter("v1", "incr"); got != inst+" 2" {
		t.Fatalf("after the restart v1 counts %q; want %s 2", got, inst)
	}
	if _, err := os.Stat(copyDir); !os.IsNotExist(err) {
		t.Fatalf("after the restart the incomplete copy: %v; want it removed", err)
	}
	if msg := stepMessage(t, d, "v1", "reconcile"); !strings.Contains(msg, "removed the incomplete copy of stored snapshot "+snap.ID) {
		t.Fatalf("v1's history says %q; want the incomplete copy's removal", msg)
	}
	if msg := runFromStored(t, d, "v2", snap.Stored, inst); strings.Contains(msg, ": 0 B fetched from") {
		t.Fatalf("v2's pull ended with %q; want its chunks fetched from the store", msg)
	}
}

// TestPulledCopyWrittenAfterTheResume: a resume that pulls its snapshot
// through a view holds the memory image in memory while the sandbox is
// restored, and writes it into the node's copy after the actor runs: the
// history says so, the actor counts on, a second actor of the template
// started from the same stored snapshot copies every chunk from that copy
// (waiting for it to be written rather than fetching again), and deleting
// the actor removes the copy.
func TestPulledCopyWrittenAfterTheResume(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	inst, snap := storedCounter(t, d)
	copyDir := filepath.Join(d.data, "snapshots", snap.ID)
	if r := d.op("Resume", "v1"); r.State != api.Running {
		t.Fatalf("resumed: %+v", r)
	}
	if got := d.execCounter("v1", "incr"); got != inst+" 2" {
		t.Fatalf("after the resume v1 counts %q; want %s 2", got, inst)
	}
	if msg := stepMessage(t, d, "v1", "arrived"); !strings.Contains(msg, "held in memory, is being written into "+copyDir) {
		t.Fatalf("the resume's arrived step says %q; want the image written from memory after it", msg)
	}

	if msg := runFromStored(t, d, "v2", snap.Stored, inst); !strings.Contains(msg, ": 0 B fetched from") || !strings.Contains(msg, "taken from this node's copies") {
		t.Fatalf("v2's pull ended with %q; want every chunk copied from v1's copy", msg)
	}
	if _, err := os.Stat(filepath.Join(copyDir, snapshot.ManifestName)); err != nil {
		t.Fatalf("v1's pulled copy is not whole: %v", err)
	}
	d.op("Delete", "v1")
	if _, err := os.Stat(copyDir); !os.IsNotExist(err) {
		t.Fatalf("v1 deleted, its pulled copy: %v; want it gone", err)
	}
}

// storedCounter makes a counter template on d (32 MiB of its own, so that
// a pull reads several stretches), runs v1, counts once and suspends it
// into the store; v1's copy on the node goes, so that its resume pulls the
// stored snapshot. It returns v1's instance and that snapshot.
func storedCounter(t *testing.T, d *daemon) (string, *api.Snapshot) {
	t.Helper()
	bundle := testactor.Bundle(t, t.TempDir(), testactor.Options{Ballast: []string{"0", "32", "0", "3"}})
	if _, err := d.api.CreateTemplate(context.Background(), api.Template{Name: "counter", Bundle: bundle, Probe: api.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30}}); err != nil {
		t.Fatal(err)
	}
	d.run("counter", "v1")
	inst, _, _ := strings.Cut(d.execCounter("v1", "incr"), " ")
	s := d.op("Suspend", "v1")
	if s.State != api.Suspended || s.Snapshot == nil || s.Snapshot.Stored == "" {
		t.Fatalf("suspended: %+v; want it stored", s)
	}
	if err := os.RemoveAll(filepath.Join(d.data, "snapshots", s.Snapshot.ID)); err != nil {
		t.Fatal(err)
	}
	return inst, s.Snapshot
}

// runFromStored starts actor id of the counter template from the stored
// snapshot stored, checks that it counts on from instance inst's first
// count, and returns what its pull's arrived step said.
func runFromStored(t *testing.T, d *daemon, id, stored, inst string) string {
	t.Helper()
	r, err := d.api.Run(context.Background(), api.RunRequest{Template: "counter", ID: id, FromStored: stored})
	if err != nil || r.State != api.Running {
		t.Fatalf("%s from %s: %+v %v", id, stored, r, err)
	}
	if got := d.execCounter(id, "incr"); got != inst+" 2" {
		t.Fatalf("%s counts %q; want %s 2", id, got, inst)
	}
	return stepMessage(t, d, id, "arrived")
}

// stepMessage is the message of the last event of step on actor id.
func stepMessage(t *testing.T, d *daemon, id, step string) string {
	t.Helper()
	events, err := d.api.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	msg := ""
	for _, e := range events.Events {
		if e.Step == step && e.Message != "" {
			msg = e.Message
		}
	}
	return msg
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
