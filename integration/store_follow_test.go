package integration

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/store/location"
)

// TestSuspendStoresTheImageAsItIsWritten: stasisd suspends an actor of
// 1.1 GiB into its store reading the image while runsc writes it (the
// commit says so), and a second stasisd starts it from the store with its
// state.
func TestSuspendStoresTheImageAsItIsWritten(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "store")
	if _, err := location.Repository(context.Background(), repo, true); err != nil {
		t.Fatal(err)
	}
	a, b := newDaemon(t, "--repo", repo), newDaemon(t, "--repo", repo)
	a.start("")
	b.start("")
	ballastTemplate(t, "large", "1100", a, b)
	moveByStore(t, a, b, "large", "l1")
	if n := countSteps(a.events("l1"), "commit", "read as they were written"); n != 1 {
		t.Fatalf("%d commits read the image as it was written; want 1: %+v", n, a.events("l1"))
	}
}
