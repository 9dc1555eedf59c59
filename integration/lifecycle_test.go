package integration

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
)

// TestLifecycle walks an actor through run, pause, resume, suspend (into
// the embedded store), resume and delete, its in-memory counter going on.
func TestLifecycle(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	first := d.counter("a1", "incr")
	inst, _, _ := strings.Cut(first, " ")

	if a := d.op("Pause", "a1"); a.State != api.Paused || a.Snapshot == nil || a.Snapshot.Kind != api.KindPause || a.Snapshot.Stored != "" {
		t.Fatalf("after pause: %+v", a)
	}
	d.requireNoSandbox("a1")
	d.op("Resume", "a1")
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("after pause and resume the counter says %q, want %q", got, inst+" 2")
	}
	a := d.op("Suspend", "a1")
	if a.State != api.Suspended || a.Snapshot == nil || a.Snapshot.Stored == "" || a.Reason != "" {
		t.Fatalf("after suspend: %+v", a)
	}
	d.requireNoSandbox("a1")
	// The local copy goes; resume must fetch the snapshot from the store.
	if err := os.RemoveAll(a.Snapshot.Dir); err != nil {
		t.Fatal(err)
	}
	d.op("Resume", "a1")
	if got := d.counter("a1", "incr"); got != inst+" 3" {
		t.Fatalf("after suspend and resume from the store the counter says %q", got)
	}
	events, err := d.api.Events(context.Background(), "a1", 0)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]bool{}
	for _, e := range events.Events {
		steps[e.Step] = true
	}
	for _, want := range []string{"bundle", "boot", "probe", "gpu-suspend", "checkpoint", "commit", "push", "pull", "restore"} {
		if want == "gpu-suspend" {
			continue // a CPU actor has no GPU step
		}
		if !steps[want] {
			t.Errorf("no %q event in the history: %v", want, steps)
		}
	}
	stored := a.Snapshot.Stored
	if _, err := call(context.Background(), d.api, "Delete", "a1"); err != nil {
		t.Fatal(err)
	}
	d.requireNoSandbox("a1")
	if _, err := d.api.InspectActor(context.Background(), "a1"); err == nil {
		t.Fatal("the deleted actor is still there")
	}
	if _, err := os.Stat(d.data + "/actors/a1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the actor's folder is left: %v", err)
	}
	snaps, err := d.api.ListSnapshots(context.Background(), "a1")
	if err != nil || len(snaps) != 1 || snaps[0].Stored != stored {
		t.Fatalf("the stored snapshot is not kept after delete: %+v %v", snaps, err)
	}
	var apiErr *api.Error
	if _, err := call(context.Background(), d.api, "Resume", "a1"); !errors.As(err, &apiErr) || apiErr.Code != "not_found" {
		t.Fatalf("resume of a deleted actor: %v", err)
	}
}
