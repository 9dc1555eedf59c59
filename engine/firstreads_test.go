package engine_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestFirstReadsRecordedAndReadFirst: a file the sandbox holds and reads
// after a resume, its pages gone from the page cache before, is recorded
// in the next suspend's manifest (firstReads), and the resume of that
// snapshot reads it into the page cache before the sandbox is reported
// ready, saying so; a suspend after that, the sandbox having read nothing
// new, keeps the same first reads.
func TestFirstReadsRecordedAndReadFirst(t *testing.T) {
	f := newFixture(t)
	a := f.start("first-reads", testactor.Options{})
	ctx := context.Background()
	data := filepath.Join(a.Bundle, "rootfs", "data.bin")
	const size = 8 << 20
	buf := make([]byte, size)
	if _, err := rand.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		res, err := f.rt.Exec(ctx, a.ID, runtime.Process{Args: []string{"/counter", "read", "/data.bin"}})
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != fmt.Sprint(size) {
			t.Fatalf("counter read /data.bin: %v exit %d: %s %s", err, res.ExitCode, res.Stdout, res.Stderr)
		}
	}
	evict := func() {
		t.Helper()
		file, err := os.Open(data)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		if err := file.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Fadvise(int(file.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	resident := func() int64 {
		t.Helper()
		file, err := os.Open(data)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		pages, err := fsutil.ResidentPages(file)
		if err != nil {
			t.Fatal(err)
		}
		return pages.Bytes(0, size)
	}
	resume := func(dir string) {
		t.Helper()
		if _, err := f.eng.Resume(ctx, a, dir, engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}}); err != nil {
			t.Fatal(err)
		}
	}

	// Held before the first suspend, so that the resume knows the file.
	read()
	dir1 := filepath.Join(t.TempDir(), "s1")
	m1, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(m1.OpenFiles, "/data.bin") {
		t.Fatalf("the sandbox held %q, not /data.bin", m1.OpenFiles)
	}
	if len(m1.FirstReads) != 0 {
		t.Fatalf("a suspend of a sandbox this engine never resumed records first reads %v", m1.FirstReads)
	}
	evict()
	resume(dir1)
	if got := resident(); got > size/2 {
		t.Fatalf("%d bytes of the file are in the page cache after the resume; the test wants it cold", got)
	}
	read()
	dir2 := filepath.Join(t.TempDir(), "s2")
	m2, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir2})
	if err != nil {
		t.Fatal(err)
	}
	var recorded int64
	for _, r := range m2.FirstReads {
		if r.Path == "/data.bin" {
			recorded += r.Length
		}
	}
	if recorded != size {
		t.Fatalf("the suspend after the read records %d bytes of /data.bin among its first reads %v, want %d", recorded, m2.FirstReads, size)
	}
	loaded, err := snapshot.Load(dir2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loaded.FirstReads, m2.FirstReads) {
		t.Fatalf("the committed manifest's first reads %v, the suspend returned %v", loaded.FirstReads, m2.FirstReads)
	}

	evict()
	if got := resident(); got > size/2 {
		t.Fatalf("%d bytes of the file are in the page cache after it was dropped", got)
	}
	resume(dir2)
	if got := resident(); got != size {
		t.Fatalf("%d bytes of the file are in the page cache after the resume that reads it first, want %d", got, size)
	}
	want := "read 8.0 MiB of the 8.0 MiB the sandbox read first after an earlier resume"
	if notes := f.notes("resume"); !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
		t.Fatalf("no resume note starting %q; notes: %q", want, notes)
	}
	dir3 := filepath.Join(t.TempDir(), "s3")
	m3, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir3})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m3.FirstReads, m2.FirstReads) {
		t.Fatalf("a suspend after nothing new was read records %v, the snapshot it resumed from %v", m3.FirstReads, m2.FirstReads)
	}

	// First reads of a FIFO and of a symbolic link (a manifest written by
	// hand): skipped, without waiting on the FIFO; the file read as before.
	rootfs := filepath.Join(a.Bundle, "rootfs")
	if err := unix.Mkfifo(filepath.Join(rootfs, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/data.bin", filepath.Join(rootfs, "link")); err != nil {
		t.Fatal(err)
	}
	m3.FirstReads = append(m3.FirstReads, snapshot.FileRange{Path: "/fifo", Offset: 0, Length: 4096}, snapshot.FileRange{Path: "/link", Offset: 0, Length: 4096})
	data3, err := json.Marshal(m3)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir3, snapshot.ManifestName), data3, 0o644); err != nil {
		t.Fatal(err)
	}
	evict()
	resume(dir3)
	if got := resident(); got != size {
		t.Fatalf("%d bytes of the file are in the page cache after the resume, want %d", got, size)
	}
	want = "read 8.0 MiB of the 8.0 MiB the sandbox read first after an earlier resume"
	if notes := f.notes("resume"); !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
		t.Fatalf("no resume note starting %q; notes: %q", want, notes)
	}
}
