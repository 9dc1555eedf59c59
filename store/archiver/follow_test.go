package archiver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/mem"
)

// TestFollowerStoresTheImageWhileItIsWritten: a follower cuts a segment of
// an image file while the rest is still being written; once the image is
// whole its blocks are the commit's, the push after it writes no pack
// again, and the stored snapshot is the folder.
func TestFollowerStoresTheImageWhileItIsWritten(t *testing.T) {
	ctx := context.Background()
	be := mem.New("follow")
	repo, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	image := filepath.Join(dir, "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		t.Fatal(err)
	}
	// Two segments and a tail: pages, some of them zeros, as a memory
	// image has.
	pages := imageBytes(2*segmentSize+5<<20+123, 1)
	f := NewFollower(repo, 0)
	cut := make(chan int, 8)
	f.cutHook = func(path string, index int) {
		if path == "image/pages.img" {
			cut <- index
		}
	}
	if err := f.Follow(ctx, dir, "image"); err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	// The runtime writes the pages file front to back; the first segment
	// is cut while the second is half written.
	fh, err := os.Create(filepath.Join(image, "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		for len(b) > 0 {
			n := min(len(b), 4<<20)
			if _, err := fh.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
	}
	half := segmentSize + segmentSize/2
	write(pages[:half])
	select {
	case index := <-cut:
		if index != 0 {
			t.Fatalf("segment %d was cut first, with the second half written: want 0", index)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the first segment was not cut while the file was written")
	}
	write(pages[half:])
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(image, "checkpoint.img"), imageBytes(3<<20, 2), 0o600); err != nil {
		t.Fatal(err)
	}

	known, err := f.Written(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(known) != 2 || len(known["image/pages.img"]) != 9 || len(known["image/checkpoint.img"]) != 1 {
		t.Fatalf("blocks known of %d files, %d of pages.img (want 9), %d of checkpoint.img (want 1)", len(known), len(known["image/pages.img"]), len(known["image/checkpoint.img"]))
	}
	m, err := snapshot.CommitHashed(ctx, dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a"}, known)
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.VerifyContents(ctx, dir, m); err != nil {
		t.Fatalf("the blocks hashed as the files were written are not the files': %v", err)
	}

	before := objects(t, be, "data/")
	s, err := SaveManifest(ctx, repo, "s1", dir, m, Options{Followed: f})
	if err != nil {
		t.Fatal(err)
	}
	if after := objects(t, be, "data/"); after != before {
		t.Fatalf("the push wrote %d packs after the follower stored the image", after-before)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := RestoreSnapshot(ctx, repo, s, out, Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(out, "image", "pages.img"))
	if err != nil || !bytes.Equal(got, pages) {
		t.Fatalf("the stored pages file is not the one written (%v)", err)
	}
}

// TestFollowerStoppedGivesNothing: a follower whose work is stopped
// gives no segments and no blocks, and the push then cuts the folder
// itself.
func TestFollowerStoppedGivesNothing(t *testing.T) {
	ctx := context.Background()
	repo, err := store.Init(ctx, mem.New("stopped"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	data := imageBytes(1<<20, 3)
	if err := os.WriteFile(filepath.Join(dir, "image", "pages.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	f := NewFollower(repo, 0)
	if err := f.Follow(ctx, dir, "image"); err != nil {
		t.Fatal(err)
	}
	f.Stop()
	if _, err := f.Written(ctx); err == nil {
		t.Fatal("a stopped follower's Written succeeded")
	}
	if _, ok := f.segment("image/pages.img", 0, 0, int64(len(data))); ok {
		t.Fatal("a stopped follower gave a segment")
	}
	m, err := snapshot.Commit(ctx, dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := SaveManifest(ctx, repo, "s1", dir, m, Options{Followed: f})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if len(s.Files) != 1 || len(s.Files[0].Chunks) == 0 {
		t.Fatalf("the push after a stopped follower stored %+v", s.Files)
	}
	// Its lock is released: GC takes the exclusive one.
	if unlock, err := repo.Lock(ctx, true); err != nil {
		t.Fatalf("the follower's lock outlived Close: %v", err)
	} else {
		unlock()
	}
}

// TestWrittenBelowStopsAtAHole: a file written ahead of a region not yet
// written is ready only up to that region.
func TestWrittenBelowStopsAtAHole(t *testing.T) {
	fh, err := os.Create(filepath.Join(t.TempDir(), "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(imageBytes(1<<20, 4), 4<<20); err != nil {
		t.Fatal(err)
	}
	if got := writtenBelow(fh, 0, 5<<20); got != 0 {
		t.Fatalf("written below %d with the first 4 MiB a hole, want 0", got)
	}
	if _, err := fh.WriteAt(imageBytes(4<<20, 5), 0); err != nil {
		t.Fatal(err)
	}
	if got := writtenBelow(fh, 0, 5<<20); got != 5<<20 {
		t.Fatalf("written below %d with every byte written, want %d", got, 5<<20)
	}
}

// imageBytes is n bytes of 4 KiB pages, random but for every fourth,
// which is zeros.
func imageBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed))
	for at := 0; at < n; at += 8 {
		if (at>>12)%4 == 3 {
			continue
		}
		v := rng.Uint64()
		for i := 0; i < 8 && at+i < n; i++ {
			b[at+i] = byte(v >> (8 * i))
		}
	}
	return b
}

// objects counts be's objects under prefix.
func objects(t *testing.T, be store.Backend, prefix string) int {
	t.Helper()
	n := 0
	if err := be.List(context.Background(), prefix, func(string, int64) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFollowerOfAStoreThatHangs: with the store hanging on every write,
// Follow returns at once, and Written, the lock not taken, gives up at
// once, saying why.
func TestFollowerOfAStoreThatHangs(t *testing.T) {
	ctx := context.Background()
	f := followHanging(t, "", nil)
	if _, err := f.Written(ctx); err == nil || !strings.Contains(err.Error(), "did not answer while the image was written") {
		t.Fatalf("Written with the store hanging: %v; want its refusal, saying why", err)
	}
}

// TestFollowerOfAStoreThatTakesNoPack: with the lock taken but no pack
// ever written, Written gives up when its context ends, saying why.
func TestFollowerOfAStoreThatTakesNoPack(t *testing.T) {
	ctx := context.Background()
	f := followHanging(t, "data/", imageBytes(1<<20, 6))
	// Written is asked once the lock is held, as after a checkpoint.
	for !f.locked.Load() {
		runtime.Gosched()
	}
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := f.Written(wctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "slower than the checkpoint") {
		t.Fatalf("Written with no pack written: %v; want its deadline, saying why", err)
	}
}

// followHanging starts a follower on an image folder (holding pages, when
// given) into a store whose writes of keys under prefix hang.
func followHanging(t *testing.T, prefix string, pages []byte) *Follower {
	t.Helper()
	ctx := context.Background()
	be := mem.New("hanging")
	if _, err := store.Init(ctx, be); err != nil {
		t.Fatal(err)
	}
	repo, err := store.Open(ctx, hangingWrites{be, prefix})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if pages != nil {
		if err := os.WriteFile(filepath.Join(dir, "image", "pages.img"), pages, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f := NewFollower(repo, 0)
	t.Cleanup(f.Close)
	if err := f.Follow(ctx, dir, "image"); err != nil {
		t.Fatal(err)
	}
	return f
}

// hangingWrites is a backend whose writes of keys under prefix never end
// before their context.
type hangingWrites struct {
	store.Backend
	prefix string
}

func (h hangingWrites) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if !strings.HasPrefix(key, h.prefix) {
		return h.Backend.Put(ctx, key, r, size)
	}
	<-ctx.Done()
	return ctx.Err()
}
