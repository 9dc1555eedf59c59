package store_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
)

// TestPullCopiesWhatTheNodeHolds: a pull of a snapshot that shares most of
// its bytes with one this node holds (two actors of one template) copies
// the shared chunks from the local copy, hash-checked, and fetches only the
// rest; a local copy that changed since costs fetches, never a wrong byte.
func TestPullCopiesWhatTheNodeHolds(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	a, b := makeFolder(t, 24, 2, 1), makeFolder(t, 24, 2, 2)
	for name, dir := range map[string]string{"a": a, "b": b} {
		if _, err := archiver.Save(ctx, r, name, dir, archiver.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	here := filepath.Join(t.TempDir(), "a")
	if _, err := archiver.RestoreSnapshot(ctx, r, mustSnapshot(t, r, "a"), here, archiver.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
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

func mustSnapshot(t *testing.T, r *store.Repository, name string) *store.Snapshot {
	t.Helper()
	s, err := r.Snapshot(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
