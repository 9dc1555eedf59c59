package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
	"golang.org/x/sys/unix"
)

// TestResumeReadsTheHeldFilesFirst: a suspend records the files of the
// sandbox's root file system that it held (the counter's own binary among
// them) and the ranges it had mapped (of the same binary), and the resume
// reads them, and runsc's binary, into the page cache (the held files'
// metadata before its restore, the mapped ranges once the sandbox runs),
// saying so in notes; each recorded path finds its file through the
// bundle.
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
	i := slices.IndexFunc(m.MappedFiles, func(f runtime.MappedFile) bool { return f.Path == "/counter" })
	if i < 0 || len(m.MappedFiles[i].Ranges) == 0 {
		t.Fatalf("the manifest's mapped files %v lack the counter's binary", m.MappedFiles)
	}
	// What was committed is what a resume reads.
	loaded, err := snapshot.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.OpenFiles, m.OpenFiles) {
		t.Fatalf("the committed manifest lists %q, the suspend returned %q", loaded.OpenFiles, m.OpenFiles)
	}
	if !reflect.DeepEqual(loaded.MappedFiles, m.MappedFiles) {
		t.Fatalf("the committed manifest's mapped files are %v, the suspend returned %v", loaded.MappedFiles, m.MappedFiles)
	}
	if _, err := f.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}}); err != nil {
		t.Fatal(err)
	}
	if got := f.counter(a.ID, "get"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("counter says %q after the resume, want 1", got)
	}
	want := fmt.Sprintf("read into the page cache before the restore: the runtime's binary and the metadata of %d of the %d files the sandbox held", len(m.OpenFiles), len(m.OpenFiles))
	wantMapped := fmt.Sprintf("reading ahead of the sandbox the %s of %d files that it had mapped", units.Bytes(mappedBytes(m)), len(m.MappedFiles))
	var notes []string
	sawHeld, sawMapped := false, false
	for _, ev := range f.events {
		if ev.Op == "resume" && ev.Name == "note" {
			sawHeld = sawHeld || strings.HasPrefix(ev.Message, want)
			sawMapped = sawMapped || ev.Message == wantMapped
			notes = append(notes, ev.Message)
		}
	}
	if !sawHeld || !sawMapped {
		t.Fatalf("no resume notes starting %q and saying %q; notes: %q", want, wantMapped, notes)
	}
}

func mappedBytes(m *snapshot.Manifest) int64 {
	var n int64
	for _, f := range m.MappedFiles {
		for _, r := range f.Ranges {
			n += r[1]
		}
	}
	return n
}

// TestMappedPiecesRead: the ranges of a mapped file, found through the
// bundle, are read into the page cache in pieces, up to the bound given
// (which a file missing on this node counts towards, read or not), and
// nothing else of the file.
func TestMappedPiecesRead(t *testing.T) {
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	spec, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	host := bundle.HostPathOf(spec, dir, "/data.bin")
	page := int64(os.Getpagesize())
	if err := os.WriteFile(host, make([]byte, 64*page), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(host)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Out of the page cache: written back, then dropped.
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	mapped := []runtime.MappedFile{
		{Path: "/not-here.so", Ranges: [][2]int64{{0, page}}},
		{Path: "/data.bin", Ranges: [][2]int64{{0, 2 * page}, {8 * page, 3 * page}, {40 * page, 10 * page}}},
	}
	read, size, files := engine.ReadMappedPieces(context.Background(), spec, dir, mapped, 10*page)
	if size != 10*page || read != 9*page || files != 2 {
		t.Fatalf("read %d of %d bytes of %d files, want %d of %d of 2", read, size, files, 9*page, 10*page)
	}
	pm, err := fsutil.ResidentPages(f)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(64) {
		want := i < 2 || i >= 8 && i < 11 || i >= 40 && i < 44
		if got := pm.Bytes(i*page, page) != 0; got != want {
			t.Errorf("page %d in the page cache: %v, want %v", i, got, want)
		}
	}
}

func TestFirstRanges(t *testing.T) {
	files := func() []runtime.MappedFile {
		return []runtime.MappedFile{
			{Path: "/a", Ranges: [][2]int64{{0, 1}, {2, 1}}},
			{Path: "/b", Ranges: [][2]int64{{0, 1}, {2, 1}, {4, 1}}},
		}
	}
	for max, want := range map[int][]runtime.MappedFile{
		1: {{Path: "/a", Ranges: [][2]int64{{0, 1}}}},
		2: {{Path: "/a", Ranges: [][2]int64{{0, 1}, {2, 1}}}},
		3: {{Path: "/a", Ranges: [][2]int64{{0, 1}, {2, 1}}}, {Path: "/b", Ranges: [][2]int64{{0, 1}}}},
		5: files(),
		9: files(),
	} {
		if got := engine.FirstRanges(files(), max); !reflect.DeepEqual(got, want) {
			t.Errorf("the first %d ranges: %v, want %v", max, got, want)
		}
	}
}
