package store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
	"golang.org/x/sys/unix"
)

// TestPullCopiesWhatTheNodeHolds: a pull of a snapshot that shares most of
// its bytes with one this node holds (two actors of one template) copies
// the shared chunks from the local copy, hash-checked, and fetches only the
// rest; a local copy that changed since costs fetches, never a wrong byte.
func TestPullCopiesWhatTheNodeHolds(t *testing.T) {
	ctx := context.Background()
	r, b, here := templateHeldHere(t)
	sa, sb := mustSnapshot(t, r, "a"), mustSnapshot(t, r, "b")
	seeds := []archiver.Seed{{Dir: here, Snapshot: sa}}
	out := filepath.Join(t.TempDir(), "b")
	p, err := archiver.RestoreSnapshot(ctx, r, sb, out, archiver.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, b, out)
	if p.Seeded < 20<<20 || p.Fetched > p.Bytes/4 || p.Seeded+p.Fetched < p.Bytes-(4<<20) {
		t.Fatalf("pulled %+v: want the template's 24 MiB copied from this node, the rest fetched", p)
	}
	// The local copy changed behind the store's back.
	pages := filepath.Join(here, "image", "pages.img")
	data, err := os.ReadFile(pages)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(data); i += 1 << 20 {
		data[i] ^= 0xff
	}
	if err := os.WriteFile(pages, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out2 := filepath.Join(t.TempDir(), "b2")
	p2, err := archiver.RestoreSnapshot(ctx, r, sb, out2, archiver.Options{Seeds: seeds})
	if err != nil {
		t.Fatal(err)
	}
	sameFiles(t, b, out2)
	if p2.Fetched < p.Fetched+20<<20 {
		t.Fatalf("pulled %+v from a changed local copy: its chunks must be fetched instead", p2)
	}
}

// templateHeldHere stores two snapshots of one template ("a", "b": 24 MiB
// shared, 2 MiB each their own) and pulls "a" onto this node: the
// repository, b's folder, and a's pulled copy.
func templateHeldHere(t *testing.T) (r *store.Repository, b, here string) {
	t.Helper()
	ctx := context.Background()
	r, _ = newRepo(t)
	a, b := makeFolder(t, 24, 2, 1), makeFolder(t, 24, 2, 2)
	for name, dir := range map[string]string{"a": a, "b": b} {
		if _, err := archiver.Save(ctx, r, name, dir, archiver.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	here = filepath.Join(t.TempDir(), "a")
	if _, err := archiver.RestoreSnapshot(ctx, r, mustSnapshot(t, r, "a"), here, archiver.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	return r, b, here
}

func mustSnapshot(t *testing.T, r *store.Repository, name string) *store.Snapshot {
	t.Helper()
	s, err := r.Snapshot(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStagedPullServesWhatTheNodeHoldsInPlace: a pull that holds its image
// in memory (Options.Stage) does not copy the chunks a seed holds: its
// readers are served them from the seed, checked, beside the fetched ones
// from memory, and the folder is written whole from both, even once the
// seed's folder is gone (its files stay open until then).
func TestStagedPullServesWhatTheNodeHoldsInPlace(t *testing.T) {
	ctx := context.Background()
	r, b, here := templateHeldHere(t)
	want, err := os.ReadFile(filepath.Join(b, "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "b")
	f, err := archiver.StartRestore(ctx, r, mustSnapshot(t, r, "b"), out, archiver.Options{NoSync: true, Stage: upTo(1 << 30),
		Seeds: []archiver.Seed{{Dir: here, Snapshot: mustSnapshot(t, r, "a")}}})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := f.Open("image/pages.img")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	p, err := f.Fetched()
	if err != nil {
		t.Fatal(err)
	}
	if p.Seeded < 20<<20 || p.Fetched > p.Bytes/4 {
		t.Fatalf("pulled %+v: want the template's 24 MiB taken from this node, the rest fetched", p)
	}
	// The seed's folder goes (its actor removed) while the pull's image
	// is still served and written from it.
	if err := os.RemoveAll(here); err != nil {
		t.Fatal(err)
	}
	if err := f.Await(ctx, "image/pages.img", 0, int64(len(want))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	// Pieces that cross from seeded chunks into fetched ones and back.
	for at := 0; at < len(got); at += 777 << 10 {
		end := min(at+777<<10, len(got))
		if n, err := reader.ReadAt(got[at:end], int64(at)); n != end-at {
			t.Fatalf("read %d bytes at %d: %d, %v", end-at, at, n, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the image read during the pull differs from the stored one")
	}
	if _, err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, b, out)
}

// TestSeedReadFromItsCheapestSource: from a store on this node's disks, a
// seed serves a chunk when no more of it must be read from disk than the
// store would send. A template copy in the page cache serves every chunk
// it shares; once the kernel has dropped it, its compressible chunks come
// from the store (compressed, fewer bytes) and its incompressible ones from
// the copy (as many bytes either way, and nothing to decode). From a store
// elsewhere the copy serves all it shares, in the page cache or not.
func TestSeedReadFromItsCheapestSource(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	if !store.OnNodeDisk(r.Backend()) || !store.OnNodeDisk(store.WithRetry(r.Backend(), store.RetryPolicy{})) {
		t.Fatalf("a folder store in %s does not say it is on this node's disks", root)
	}
	// 16 MiB of the template that compress to about half (a random
	// nibble a byte), 8 MiB that do not, then each actor's own 2 MiB, each
	// in a file of its own: the chunks of one file never hold bytes of
	// another, so each part is shared or not, compressible or not, whole
	// wherever the chunker (keyed by the repository) cuts.
	compressible := randomBytes(1, 16<<20)
	for i := range compressible {
		compressible[i] &= 0x0f
	}
	folder := func(own uint64) string {
		return commitFiles(t, map[string][]byte{
			"pages.img":   compressible,
			"pages-2.img": randomBytes(7, 8<<20),
			"own.img":     randomBytes(own, 2<<20),
		})
	}
	a, b := folder(1), folder(2)
	for name, dir := range map[string]string{"a": a, "b": b} {
		if _, err := archiver.Save(ctx, r, name, dir, archiver.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	here := filepath.Join(t.TempDir(), "a")
	if _, err := archiver.RestoreSnapshot(ctx, r, mustSnapshot(t, r, "a"), here, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	pull := func(r *store.Repository) archiver.Pulled {
		t.Helper()
		out := filepath.Join(t.TempDir(), "b")
		p, err := archiver.RestoreSnapshot(ctx, r, mustSnapshot(t, r, "b"), out, archiver.Options{NoSync: true,
			Seeds: []archiver.Seed{{Dir: here, Snapshot: mustSnapshot(t, r, "a")}}})
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, b, out)
		return p
	}
	// Just written, the copy is in the page cache: all it shares is taken.
	const shared = 24 << 20
	if p := pull(r); p.Seeded < shared || p.Fetched > p.Bytes-shared {
		t.Fatalf("pulled %+v beside a copy in the page cache: want its 24 MiB taken from it", p)
	}
	// Dropped from the page cache (its pages clean, as the pull synced it).
	dropCache := func() {
		t.Helper()
		for _, name := range []string{"pages.img", "pages-2.img", "checkpoint.img"} {
			f, err := os.Open(filepath.Join(here, "image", name))
			if err != nil {
				t.Fatal(err)
			}
			err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	dropCache()
	p := pull(r)
	if p.Fetched < 18<<20 || p.Seeded < 8<<20 || p.Seeded > 8<<20+64 {
		t.Fatalf("pulled %+v beside a copy out of the page cache: want the compressible 16 MiB fetched, the other 8 MiB taken from the copy", p)
	}
	if p.Stored >= p.Fetched*3/4 {
		t.Fatalf("pulled %+v: the fetched chunks should have been stored compressed", p)
	}
	// The same store read as from elsewhere (a backend that does not say
	// it is on this node's disks), the copy dropped again.
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	far, err := store.Open(ctx, elsewhere{be})
	if err != nil {
		t.Fatal(err)
	}
	dropCache()
	if p := pull(far); p.Seeded < shared || p.Fetched > p.Bytes-shared {
		t.Fatalf("pulled %+v from a store elsewhere: want the 24 MiB the copy shares taken from it", p)
	}
}

// elsewhere is a backend that does not say where its objects are.
type elsewhere struct{ store.Backend }
