package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestResumeReadsTheHeldFilesFirst: a suspend records the files of the
// sandbox's root file system that it held (the counter's own binary among
// them), and the resume reads them, and runsc's binary, into the page
// cache before its restore, saying so in a note; each recorded path finds
// its file through the bundle.
func TestResumeReadsTheHeldFilesFirst(t *testing.T) {
	f := newFixture(t)
	a := f.start("held-files", testactor.Options{})
	f.incr(a.ID, 1)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Scope: snapshot.ScopeFull})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(m.OpenFiles, "/counter") {
		t.Fatalf("the manifest's open files %q lack the counter's binary", m.OpenFiles)
	}
	t.Logf("the sandbox held %q", m.OpenFiles)
	// What was committed is what a resume reads.
	loaded, err := snapshot.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.OpenFiles, m.OpenFiles) {
		t.Fatalf("the committed manifest lists %q, the suspend returned %q", loaded.OpenFiles, m.OpenFiles)
	}
	if _, err := f.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}}); err != nil {
		t.Fatal(err)
	}
	if got := f.counter(a.ID, "get"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("counter says %q after the resume, want 1", got)
	}
	want := fmt.Sprintf("read into the page cache before the restore: the runtime's binary and the metadata of %d of the %d files the sandbox held", len(m.OpenFiles), len(m.OpenFiles))
	var notes []string
	for _, ev := range f.events {
		if ev.Op == "resume" && ev.Name == "note" {
			if strings.HasPrefix(ev.Message, want) {
				return
			}
			notes = append(notes, ev.Message)
		}
	}
	t.Fatalf("no resume note starting %q; notes: %q", want, notes)
}
