package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestSuspendStoresTheImageAsItIsWritten: stasisd suspends an actor of
// 1.1 GiB into its store reading the image while runsc writes it (the
// commit says so), and a second stasisd starts it from the store with its
// state.
func TestSuspendStoresTheImageAsItIsWritten(t *testing.T) {
	ctx := context.Background()
	repo := filepath.Join(t.TempDir(), "store")
	if _, err := location.Repository(ctx, repo, true); err != nil {
		t.Fatal(err)
	}
	a, b := newDaemon(t, "--repo", repo), newDaemon(t, "--repo", repo)
	a.start("")
	b.start("")
	for _, d := range []*daemon{a, b} {
		dir := testactor.Bundle(t, t.TempDir(), testactor.Options{Ballast: []string{"0", "1100", "0", "9"}})
		if _, err := d.api.CreateTemplate(ctx, api.Template{Name: "large", Bundle: dir, Probe: api.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 60}}); err != nil {
			t.Fatal(err)
		}
	}
	a.run("large", "l1")
	inst, _, _ := strings.Cut(a.execCounter("l1", "incr"), " ")
	s := a.op("Suspend", "l1")
	if s.State != api.Suspended || s.Snapshot == nil || s.Snapshot.Stored == "" {
		t.Fatalf("l1 suspended: %+v; want it stored", s)
	}
	if n := countSteps(a.events("l1"), "commit", "read as they were written"); n != 1 {
		t.Fatalf("%d commits read the image as it was written; want 1: %+v", n, a.events("l1"))
	}
	r, err := b.api.Run(ctx, api.RunRequest{Template: "large", ID: "l1", FromStored: s.Snapshot.Stored})
	if err != nil || r.State != api.Running {
		t.Fatalf("l1 started on b from %s: %+v %v", s.Snapshot.Stored, r, err)
	}
	if got := b.execCounter("l1", "incr"); got != inst+" 2" {
		t.Fatalf("l1 counts %q on b; want %s 2", got, inst)
	}
}
