package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// gatedBackend holds every read of a pack until the test lets it go: it
// says on waiting that a read has asked, and reads once a token arrives.
type gatedBackend struct {
	store.Backend
	waiting chan string
	tokens  chan struct{}
}

func (g *gatedBackend) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if strings.HasPrefix(key, "data/") {
		g.waiting <- key
		<-g.tokens
	}
	return g.Backend.Get(ctx, key, offset, length)
}

// TestAwaitedBytesComeFirst: a reader of a folder being restored
// (archiver.StartRestore) waits only for the part it reads, which is
// fetched before the stretches ahead of it, checked, and the same as the
// stored bytes; the rest follows, and the folder ends whole.
func TestAwaitedBytesComeFirst(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	src := makeFolderZeros(t, 96, 0, 1, 0)
	if _, err := archiver.Save(ctx, r, "a", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	gate := &gatedBackend{Backend: be, waiting: make(chan string, 1000), tokens: make(chan struct{})}
	gated, err := store.Open(ctx, gate)
	if err != nil {
		t.Fatal(err)
	}
	s := mustSnapshot(t, gated, "a")
	out := filepath.Join(t.TempDir(), "out")
	f, err := archiver.StartRestore(ctx, gated, s, out, archiver.Options{Downloads: 1, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(src, "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(want))
	asked, cancel := context.WithCancel(ctx)
	cancel()       // Await then asks for the part and returns at once
	<-gate.waiting // the one worker is at its first stretch
	tail, middle := size-(1<<20), size/2
	if err := f.Await(asked, "image/pages.img", tail, 1<<20); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await of the last MiB before any stretch was read: %v, want it to be waiting", err)
	}
	gate.tokens <- struct{}{} // the first stretch
	<-gate.waiting
	gate.tokens <- struct{}{} // the awaited one
	<-gate.waiting            // the third read asks, and waits
	// The awaited stretch is decoded beside the third read: it comes
	// whole while nothing more can be read.
	bounded, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if err := f.Await(bounded, "image/pages.img", tail, 1<<20); err != nil {
		t.Fatalf("the last MiB was not fetched second, ahead of the rest: %v", err)
	}
	if err := f.Await(asked, "image/pages.img", middle, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await of the middle after two stretches: %v; want it still to come (the test reads too few stretches to mean anything)", err)
	}
	got := make([]byte, 1<<20)
	pages, err := os.Open(filepath.Join(out, "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer pages.Close()
	if _, err := pages.ReadAt(got, tail); err != nil || !bytes.Equal(got, want[tail:]) {
		t.Fatalf("the awaited MiB differs from the stored one (%v)", err)
	}
	close(gate.tokens)
	if _, err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, out)
	if err := f.Await(ctx, "image/nothing.img", 0, 1); err == nil {
		t.Fatal("Await of a file the snapshot does not have succeeded")
	}
}

// TestAwaitFailsWithTheRestore: when a restore fails (a pack is gone), a
// reader waiting on it gets the restore's error rather than waiting for
// ever, and the folder is left empty.
func TestAwaitFailsWithTheRestore(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	src := makeFolderZeros(t, 40, 0, 1, 0)
	if _, err := archiver.Save(ctx, r, "a", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	packs, err := filepath.Glob(filepath.Join(root, "data", "*", "*"))
	if err != nil || len(packs) < 2 {
		t.Fatalf("packs: %v, %v", packs, err)
	}
	if err := os.Remove(packs[len(packs)-1]); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	f, err := archiver.StartRestore(ctx, r, mustSnapshot(t, r, "a"), out, archiver.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	aerr := f.Await(ctx, "image/pages.img", 0, 40<<20)
	_, werr := f.Wait()
	if aerr == nil || werr == nil {
		t.Fatalf("a restore from a store missing a pack: Await %v, Wait %v; want both to fail", aerr, werr)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatalf("a failed restore left %d entries in its folder", len(entries))
	}
}

// TestStagedFileWrittenOnceFetched: a restore that may hold its largest
// file in memory (Options.Stage) fills it there: the folder does not have
// it while the chunks arrive, a reader opens it through the Filling and
// reads the stored bytes from memory; once every chunk is fetched the
// file is written into the folder, whole, before the manifest. A stage
// smaller than the file fills it in the folder, as without one.
func TestStagedFileWrittenOnceFetched(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	src := makeFolderZeros(t, 24, 0, 1, 0)
	if _, err := archiver.Save(ctx, r, "a", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(src, "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []int64{int64(len(want)), int64(len(want)) - 1} {
		gate := &gatedBackend{Backend: be, waiting: make(chan string, 1000), tokens: make(chan struct{})}
		gated, err := store.Open(ctx, gate)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out")
		f, err := archiver.StartRestore(ctx, gated, mustSnapshot(t, gated, "a"), out, archiver.Options{Downloads: 1, NoSync: true, Stage: upTo(stage)})
		if err != nil {
			t.Fatal(err)
		}
		staged := stage >= int64(len(want))
		<-gate.waiting // the one worker is at its first stretch
		_, statErr := os.Stat(filepath.Join(out, "image", "pages.img"))
		if staged != os.IsNotExist(statErr) || f.Staged() != staged {
			t.Fatalf("stage %d for %d bytes: during the pull the folder's image: %v, Staged %v", stage, len(want), statErr, f.Staged())
		}
		reader, err := f.Open("image/pages.img")
		if err != nil {
			t.Fatal(err)
		}
		if _, inFolder := reader.(*os.File); inFolder == staged {
			t.Fatalf("stage %d: the image opened during the pull is %T", stage, reader)
		}
		close(gate.tokens)
		if _, err := f.Fetched(); err != nil {
			t.Fatal(err)
		}
		if err := f.Await(ctx, "image/pages.img", 0, int64(len(want))); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if _, err := reader.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("stage %d: the image read through the Filling differs from the stored one (%v)", stage, err)
		}
		reader.Close()
		if _, err := f.Wait(); err != nil {
			t.Fatal(err)
		}
		sameFiles(t, src, out)
		after, err := f.Open("image/pages.img")
		if err != nil {
			t.Fatal(err)
		}
		if file, ok := after.(*os.File); !ok || file.Name() != filepath.Join(out, "image", "pages.img") {
			t.Fatalf("stage %d: once written the image opens as %T, not the folder's", stage, after)
		}
		after.Close()
	}
}

// TestStagedFileStopped: a restore stopped once every chunk is fetched,
// while its staged file may still be being written, leaves the folder
// whole or empty, never a folder with a manifest and part of a file.
func TestStagedFileStopped(t *testing.T) {
	r, _ := newRepo(t)
	src := makeFolderZeros(t, 24, 0, 1, 0)
	if _, err := archiver.Save(context.Background(), r, "a", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := filepath.Join(t.TempDir(), "out")
	f, err := archiver.StartRestore(ctx, r, mustSnapshot(t, r, "a"), out, archiver.Options{NoSync: true, Stage: upTo(1 << 30)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Fetched(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := f.Wait(); err == nil {
		sameFiles(t, src, out)
	} else if entries, _ := os.ReadDir(out); !errors.Is(err, context.Canceled) || len(entries) != 0 {
		t.Fatalf("stopped while writing: %v, and %d entries left; want the folder empty", err, len(entries))
	}
}

// upTo lends a restore memory for a file of at most limit bytes
// (archiver.Options.Stage).
func upTo(limit int64) func(int64) func() {
	return func(size int64) func() {
		if size > limit {
			return nil
		}
		return func() {}
	}
}
