package store_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/restic/chunker"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// makeFolder writes a snapshot folder: a "template" part, the same in every
// folder, a part of its own (from the seed own), and 3 MiB of zero pages.
func makeFolder(t testing.TB, templateMiB, ownMiB int, own uint64) string {
	return makeFolderZeros(t, templateMiB, ownMiB, own, 3)
}

func makeFolderZeros(t testing.TB, templateMiB, ownMiB int, own uint64, zeroMiB int) string {
	t.Helper()
	var data bytes.Buffer
	data.Write(randomBytes(1, templateMiB<<20))
	data.Write(randomBytes(own, ownMiB<<20))
	data.Write(make([]byte, zeroMiB<<20)) // zero pages compress to nothing
	return commitFolder(t, data.Bytes())
}

// commitFolder makes a committed snapshot folder whose memory image holds
// pages, beside a little kernel state.
func commitFolder(t testing.TB, pages []byte) string {
	t.Helper()
	return commitFiles(t, map[string][]byte{"pages.img": pages})
}

// commitFiles makes a committed snapshot folder whose image folder holds
// files (by name), beside a little kernel state.
func commitFiles(t testing.TB, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	files["checkpoint.img"] = []byte("kernel state")
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, "image", name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func newRepo(t testing.TB) (*store.Repository, string) {
	t.Helper()
	root := t.TempDir()
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Init(context.Background(), be)
	if err != nil {
		t.Fatal(err)
	}
	return r, root
}

// openRepo opens the repository at root again, as another process would.
func openRepo(t testing.TB, root string) *store.Repository {
	t.Helper()
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(context.Background(), be)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameFiles compares the image files byte for byte and the manifests by
// content (the store keeps the manifest's JSON, not its spacing).
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ma, err1 := snapshot.Load(a)
	mb, err2 := snapshot.Load(b)
	if err1 != nil || err2 != nil || !reflect.DeepEqual(ma, mb) {
		t.Fatalf("manifests differ after the round trip (%v, %v)", err1, err2)
	}
	names, err := os.ReadDir(filepath.Join(a, "image"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		name := filepath.Join("image", e.Name())
		x, err1 := os.ReadFile(filepath.Join(a, name))
		y, err2 := os.ReadFile(filepath.Join(b, name))
		if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
			t.Fatalf("%s differs after the round trip (%v, %v)", name, err1, err2)
		}
	}
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	src := makeFolder(t, 24, 8, 2)
	var last archiver.Progress
	snap, err := archiver.Save(ctx, r, "actor-1", src, archiver.Options{Progress: func(p archiver.Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if last.BytesDone != last.Bytes || last.FilesDone != 2 || last.Stored == 0 {
		t.Errorf("final progress %+v", last)
	}
	if snap.Size() != 35<<20+int64(len("kernel state")) {
		t.Errorf("logical size %d", snap.Size())
	}
	// Reopen: the index is read back from the backend.
	be, _ := local.New(root)
	r2, err := store.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if err := archiver.Restore(ctx, r2, "actor-1", dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
	if _, err := snapshot.Verify(context.Background(), dst); err != nil {
		t.Fatalf("the restored folder does not verify: %v", err)
	}
	if err := r2.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "actor-1", src, archiver.Options{}); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("saving over an existing snapshot: %v", err)
	}
}

func TestTwoActorsOfOneTemplateDeduplicate(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	const templateMiB, ownMiB = 64, 1
	a := makeFolder(t, templateMiB, ownMiB, 2)
	b := makeFolder(t, templateMiB, ownMiB, 3)
	var stored [2]int64
	for i, dir := range []string{a, b} {
		if _, err := archiver.Save(ctx, r, []string{"a", "b"}[i], dir, archiver.Options{Progress: func(p archiver.Progress) { stored[i] = p.Stored }}); err != nil {
			t.Fatal(err)
		}
	}
	// The template is stored once. Each actor adds its own bytes, and at
	// most two chunks (of chunker.MaxSize at worst) that straddle the edges
	// of its own part; the repository's polynomial is random, so where
	// those chunks fall changes from run to run.
	const slack = 2 * chunker.MaxSize
	if stored[1] > ownMiB<<20+slack {
		t.Errorf("the second actor stored %d bytes; want its own %d MiB and edge chunks only", stored[1], ownMiB)
	}
	u, err := r.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(templateMiB+2*ownMiB)<<20 + 2*slack; u.Snapshots != 2 || u.Stored > limit {
		t.Errorf("usage %+v: stored over %d bytes, the template was not shared", u, limit)
	}
}

// failingBackend fails every Put after the first n.
type failingBackend struct {
	store.Backend
	left atomic.Int64
}

func (f *failingBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "data/") && f.left.Add(-1) < 0 {
		return errors.New("injected: connection reset")
	}
	return f.Backend.Put(ctx, key, r, size)
}

func TestInterruptedSaveResumes(t *testing.T) {
	ctx := context.Background()
	_, root := newRepo(t)
	src := makeFolder(t, 64, 0, 2)
	be, _ := local.New(root)
	fb := &failingBackend{Backend: be}
	fb.left.Store(2)
	r, err := store.Open(ctx, fb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{Uploads: 1}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("got %v", err)
	}
	if _, err := r.Snapshot(ctx, "s"); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("an interrupted save left a snapshot: %v", err)
	}
	r, err = store.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	var last archiver.Progress
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{Progress: func(p archiver.Progress) { last = p }}); err != nil {
		t.Fatal(err)
	}
	u, err := r.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last.Stored >= u.Stored {
		t.Errorf("the retry stored %d of %d bytes; the packs written before the failure were not reused", last.Stored, u.Stored)
	}
}

// packFiles lists the repository's pack files, the largest first (a pack
// of the memory image, rather than one of a small file cut beside it).
func packFiles(t *testing.T, root string) []string {
	packs, err := filepath.Glob(filepath.Join(root, "data", "*", "*"))
	if err != nil || len(packs) == 0 {
		t.Fatalf("no packs: %v", err)
	}
	size := map[string]int64{}
	for _, p := range packs {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		size[p] = st.Size()
	}
	slices.SortFunc(packs, func(a, b string) int { return cmp.Compare(size[b], size[a]) })
	return packs
}

func TestCorruptAndMissingPacks(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	src := makeFolder(t, 4, 0, 2)
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	pack := packFiles(t, root)[0]
	data, _ := os.ReadFile(pack)
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(pack, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	err := archiver.Restore(ctx, r, "s", dst, archiver.Options{})
	if err == nil || !strings.Contains(err.Error(), "snapshot s") || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("restore of a corrupt pack: %v", err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 0 {
		t.Errorf("a failed restore left %d entries", len(entries))
	}
	if err := r.Verify(ctx, "s"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("verify of a corrupt pack: %v", err)
	}
	if err := os.Remove(pack); err != nil {
		t.Fatal(err)
	}
	if err := archiver.Restore(ctx, r, "s", dst, archiver.Options{}); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("restore with a missing pack: %v", err)
	}
}

func TestTruncatedPackAndAbsurdIndex(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	if _, err := archiver.Save(ctx, r, "s", makeFolder(t, 4, 0, 2), archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	pack := packFiles(t, root)[0]
	if err := os.Truncate(pack, 100); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(ctx, "s"); err == nil || !strings.Contains(err.Error(), "is truncated") {
		t.Errorf("verify of a truncated pack: %v", err)
	}
	// An index entry that claims a terabyte is refused before anything is
	// allocated for it.
	index := filepath.Join(root, "index", filepath.Base(pack))
	data, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	absurd := regexp.MustCompile(`"length": \d+`).ReplaceAllString(string(data), `"length": 1099511627776`)
	if err := os.WriteFile(index, []byte(absurd), 0o600); err != nil {
		t.Fatal(err)
	}
	be, _ := local.New(root)
	r, err = store.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, "s", dst, archiver.Options{}); err == nil || !strings.Contains(err.Error(), "claims 1099511627776 stored") {
		t.Errorf("restore through an absurd index entry: %v", err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 0 {
		t.Errorf("a failed restore left %d entries", len(entries))
	}
}

func TestHostileManifests(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	if _, err := archiver.Save(ctx, r, "s", makeFolder(t, 1, 0, 2), archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "snapshots", "s")
	good, _ := os.ReadFile(path)
	// The edits hit the store's own file list, which follows the folder
	// manifest embedded in "meta", and then the embedded one.
	last := func(s, old, new string) string {
		i := strings.LastIndex(s, old)
		return s[:i] + new + s[i+len(old):]
	}
	for name, edit := range map[string]func(string) string{
		"truncated":      func(s string) string { return s[:len(s)/2] },
		"version":        func(s string) string { return strings.Replace(s, `"version": 1`, `"version": 7`, 1) },
		"escape":         func(s string) string { return last(s, `"image/pages.img"`, `"../../etc/passwd"`) },
		"absolute":       func(s string) string { return last(s, `"image/pages.img"`, `"/etc/passwd"`) },
		"absurd size":    func(s string) string { return last(s, `"size": 4194304`, `"size": 9223372036854775807`) },
		"meta escape":    func(s string) string { return strings.Replace(s, `"image/pages.img"`, `"../../etc/passwd"`, 1) },
		"meta disagrees": func(s string) string { return strings.Replace(s, `"size": 4194304`, `"size": 4194305`, 1) },
	} {
		if err := os.WriteFile(path, []byte(edit(string(good))), 0o600); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		err := archiver.Restore(ctx, r, "s", dst, archiver.Options{})
		if err == nil || !strings.Contains(err.Error(), "snapshot s") {
			t.Errorf("%s: restore accepted it or did not name the snapshot: %v", name, err)
		}
		if entries, _ := os.ReadDir(dst); len(entries) != 0 {
			t.Errorf("%s: a refused restore wrote %d entries", name, len(entries))
		}
	}
	for _, bad := range []string{"../x", "a/b", "", "x y"} {
		if _, err := archiver.Save(ctx, r, bad, makeFolder(t, 1, 0, 2), archiver.Options{}); err == nil {
			t.Errorf("snapshot name %q accepted", bad)
		}
	}
	if _, err := archiver.Save(ctx, r, "nofolder", t.TempDir(), archiver.Options{}); err == nil {
		t.Error("a folder without a manifest was saved")
	}
}

func TestGCFreesUnusedPacksAndRespectsLocks(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	// Nothing shared, so that every pack of a is a's alone.
	a, b := makeFolderZeros(t, 0, 24, 2, 0), makeFolderZeros(t, 0, 24, 3, 0)
	for name, dir := range map[string]string{"a": a, "b": b} {
		if _, err := archiver.Save(ctx, r, name, dir, archiver.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := r.DU(ctx)
	if err := r.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	res, err := r.GC(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := r.DU(ctx)
	if res.PacksDeleted == 0 || after.Stored >= before.Stored || after.Stored+res.BytesFreed != before.Stored {
		t.Errorf("gc %+v: stored %d -> %d", res, before.Stored, after.Stored)
	}
	if err := archiver.Restore(ctx, r, "b", filepath.Join(t.TempDir(), "b"), archiver.Options{}); err != nil {
		t.Fatalf("the kept snapshot after gc: %v", err)
	}

	// A writer's lock keeps GC out, and GC's lock keeps writers out.
	lock := filepath.Join(root, "locks", "other")
	if err := os.WriteFile(lock, []byte(`{"exclusive": false, "host": "h", "pid": 1, "time": "`+nowRFC3339()+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.GC(ctx); !errors.Is(err, store.ErrLocked) {
		t.Errorf("gc beside a writer: %v", err)
	}
	if err := os.WriteFile(lock, []byte(`{"exclusive": true, "host": "h", "pid": 1, "time": "`+nowRFC3339()+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "c", a, archiver.Options{}); !errors.Is(err, store.ErrLocked) {
		t.Errorf("save beside gc: %v", err)
	}
	if err := os.WriteFile(lock, []byte(`{"exclusive": true, "host": "h", "pid": 1, "time": "2000-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := r.GC(ctx); err != nil || res.StaleLocks != 1 {
		t.Errorf("gc with a stale lock: %+v %v", res, err)
	}
}

func nowRFC3339() string { return time.Now().UTC().Format(time.RFC3339) }

// A file larger than a segment is cut by several cutters at once; its chunk
// list must still come out in order, and each pack must hold a stretch of
// the file in the file's order (a pull that reads the file in order then
// needs its packs one after another), not pieces of both segments.
func TestFileAcrossSegments(t *testing.T) {
	ctx := context.Background()
	// Two cutters at least, so that both segments are cut at once.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	r, _ := newRepo(t)
	src := makeFolderZeros(t, 0, 300, 11, 0) // two segments of 256 MiB
	s, err := archiver.Save(ctx, r, "big", src, archiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var pages []string
	for _, f := range s.Files {
		if f.Path == "image/pages.img" {
			pages = f.Chunks
		}
	}
	at := map[string]int{}
	for i, id := range pages {
		at[id] = i
	}
	runs, err := r.PlanReads(pages, r.PackRead())
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	for _, run := range runs {
		for _, c := range run.Chunks {
			prev, seen := last[run.Pack]
			if seen && at[c.ID] != prev+1 {
				t.Fatalf("pack %s holds chunk %d of the file right after chunk %d: a pack should hold a stretch of the file in order", run.Pack, at[c.ID], prev)
			}
			last[run.Pack] = at[c.ID]
		}
	}
	if len(last) < 2 {
		t.Fatalf("%d pack(s) for 300 MiB: the test needs several", len(last))
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, "big", dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
}

// TestDamagedObjectsAreIsolated: one unreadable manifest or index object
// does not take the repository down: the rest is listed and used, the bad
// object is named, verify fails on it after checking the rest, gc refuses
// to delete anything while it is there.
func TestDamagedObjectsAreIsolated(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	for _, name := range []string{"good", "bad"} {
		if _, err := archiver.Save(ctx, r, name, makeFolder(t, 1, 1, uint64(len(name))), archiver.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	bad := filepath.Join(root, "snapshots", "bad")
	if err := os.Truncate(bad, 40); err != nil {
		t.Fatal(err)
	}
	infos, err := r.List(ctx)
	if err != nil || len(infos) != 2 || infos[0].Name != "good" || infos[0].Damaged != "" || infos[1].Name != "bad" || !strings.Contains(infos[1].Damaged, "not valid JSON") {
		t.Fatalf("list with one damaged manifest: %+v %v", infos, err)
	}
	if err := r.Verify(ctx, "good"); err != nil {
		t.Fatalf("verify of the good one: %v", err)
	}
	if err := r.Verify(ctx); err == nil || !strings.Contains(err.Error(), "snapshots/bad") || !strings.Contains(err.Error(), "1 damaged object") {
		t.Fatalf("verify of all: %v", err)
	}
	if _, err := r.GC(ctx); err == nil || !strings.Contains(err.Error(), "nothing was deleted") {
		t.Fatalf("gc with a damaged manifest: %v", err)
	}
	if err := r.Delete(ctx, "bad"); err != nil {
		t.Fatalf("delete of the damaged manifest: %v", err)
	}
	if _, err := r.GC(ctx); err != nil {
		t.Fatalf("gc once it is gone: %v", err)
	}

	// A truncated index: the repository opens, the damage is named, a
	// restore that needs its chunks is refused before writing anything.
	indexes, _ := filepath.Glob(filepath.Join(root, "index", "*"))
	if err := os.Truncate(indexes[0], 10); err != nil {
		t.Fatal(err)
	}
	be, _ := local.New(root)
	r, err = store.Open(ctx, be)
	if err != nil {
		t.Fatalf("open with a truncated index: %v", err)
	}
	if d := r.DamagedIndexes(); len(d) != 1 || !strings.Contains(d[0].Object, "index/") {
		t.Fatalf("damaged indexes: %+v", d)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, "good", dst, archiver.Options{}); err == nil || !strings.Contains(err.Error(), "in no pack's index") {
		t.Fatalf("restore through the damaged index: %v", err)
	}
	if _, err := r.GC(ctx); err == nil || !strings.Contains(err.Error(), "index/") {
		t.Fatalf("gc with a damaged index: %v", err)
	}
}

// TestVerifyChecksWhatRestoreChecks: a stored manifest whose chunk list
// does not add up to its file is refused by verify as by restore.
func TestVerifyChecksWhatRestoreChecks(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	// 16 MiB of data: more than two of the largest chunks (8 MiB), so the
	// image has several chunks whatever cut points the repository's random
	// chunker key gives (2 MiB could fall in one).
	if _, err := archiver.Save(ctx, r, "s", makeFolder(t, 16, 0, 3), archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "snapshots", "s")
	data, _ := os.ReadFile(path)
	// Drop the first chunk of the first file with more than one.
	edited := regexp.MustCompile(`"chunks": \[\s*"[0-9a-f]{64}",`).ReplaceAllString(string(data), `"chunks": [`)
	if edited == string(data) {
		t.Fatal("no file with two chunks to edit")
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	verr := r.Verify(ctx, "s")
	rerr := archiver.Restore(ctx, r, "s", filepath.Join(t.TempDir(), "out"), archiver.Options{})
	for what, err := range map[string]error{"verify": verr, "restore": rerr} {
		if err == nil || !strings.Contains(err.Error(), "its chunks hold") {
			t.Errorf("%s of a snapshot whose chunks do not add up: %v", what, err)
		}
	}
}

// A snapshot's manifest is the commit point of a save: one that names a
// chunk no pack holds, or whose chunks do not add up, is refused and leaves
// no snapshot behind.
func TestAddSnapshotNeedsEveryChunkStored(t *testing.T) {
	ctx := context.Background()
	r, _ := newRepo(t)
	saved, err := archiver.Save(ctx, r, "a", makeFolder(t, 1, 0, 2), archiver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	missing := *saved
	missing.Name = "missing"
	missing.Files = slices.Clone(saved.Files)
	missing.Files[0].Chunks = append(slices.Clone(missing.Files[0].Chunks), strings.Repeat("ab", 32))
	if err := r.AddSnapshot(ctx, &missing); !errors.Is(err, errdefs.ErrCorrupt) || !strings.Contains(err.Error(), "in no pack's index") {
		t.Fatalf("a snapshot naming an unstored chunk: %v", err)
	}
	short := *saved
	short.Name = "short"
	short.Files = slices.Clone(saved.Files)
	short.Files[0].Size++
	if err := r.AddSnapshot(ctx, &short); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("a snapshot whose chunks do not add up: %v", err)
	}
	list, err := r.List(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "a" {
		t.Fatalf("after the refusals the repository lists %+v (%v), want only a", list, err)
	}
}

// Two writers share one store (two nodes): a snapshot one stores after the
// other opened the repository is restored by the other, whose index is
// read again when a snapshot names chunks it has not seen.
func TestSnapshotOfAnotherWriter(t *testing.T) {
	ctx := context.Background()
	r, root := newRepo(t)
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	src := makeFolder(t, 1, 1, 9)
	if _, err := archiver.Save(ctx, r, "late", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "late")
	if err := archiver.Restore(ctx, other, "late", dst, archiver.Options{}); err != nil {
		t.Fatalf("restore by the repository opened before the save: %v", err)
	}
	sameFiles(t, src, dst)
}
