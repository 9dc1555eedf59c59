//go:build storebench

// Package storebench measures the snapshot store on real runsc images of
// CPU actors that hold a model server's worth of memory:
//
//	go test -tags storebench -run TestStoreBench -v -timeout 60m ./internal/storebench
//
// STASIS_BENCH_MIB sets the template, own and zero MiB of each actor
// (default "10240,2048,1024": a 13 GB image); STASIS_BENCH_DIR the folder on
// the disk to measure (default the system temp folder). It prints a table
// and writes storebench.json into STASIS_BENCH_OUT when set.
package storebench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/s3test"
	"github.com/stasis-run/stasis/testkit/testactor"
)

type row struct {
	What    string  `json:"what"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mbPerS"`
	Note    string  `json:"note,omitempty"`
}

func timed(t *testing.T, rows *[]row, what string, bytes int64, note string, fn func() error) {
	t.Helper()
	start := time.Now()
	if err := fn(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	s := time.Since(start).Seconds()
	*rows = append(*rows, row{What: what, Bytes: bytes, Seconds: s, MBps: float64(bytes) / s / 1e6, Note: note})
	t.Logf("%s: %s in %.1f s = %.0f MB/s %s", what, units.Bytes(bytes), s, float64(bytes)/s/1e6, note)
}

// diskWrite writes size bytes sequentially and syncs them: the disk's own
// durable write speed, the yardstick for ingest.
func diskWrite(dir string, size int64) error {
	f, err := os.Create(filepath.Join(dir, "disk-probe"))
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	for written := int64(0); written < size; written += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// diskWriteDirect is diskWrite around the page cache (O_DIRECT), the way
// the local store writes its packs.
func diskWriteDirect(dir string, size int64) error {
	path := filepath.Join(dir, "disk-probe-direct")
	defer os.Remove(path)
	return fsutil.WriteAtomicDirect(path, io.LimitReader(pattern{}, size), size)
}

// pattern reads as an endless run of non-zero bytes.
type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*31) | 1
	}
	return len(p), nil
}

func folderSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

func TestStoreBench(t *testing.T) {
	ctx := context.Background()
	mib := strings.Split(envOr("STASIS_BENCH_MIB", "10240,2048,1024"), ",")
	base, err := os.MkdirTemp(os.Getenv("STASIS_BENCH_DIR"), "storebench-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	defer testactor.UnpinNetNS(filepath.Join(base, "runsc"))
	rt, err := gvisor.New(ctx, gvisor.Config{Root: filepath.Join(base, "runsc"), Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	eng := &engine.Engine{Runtime: rt}
	var rows []row

	timed(t, &rows, "disk: sequential write + fsync", 4<<30, "", func() error { return diskWrite(base, 4<<30) })
	timed(t, &rows, "disk: sequential write, O_DIRECT + fsync", 4<<30, "", func() error { return diskWriteDirect(base, 4<<30) })

	// Two actors of one template: same template bytes, their own bytes.
	image := func(id, seed string) string {
		dir := testactor.Bundle(t, filepath.Join(base, "bundle-"+id), testactor.Options{Ballast: append(mib[:3:3], seed)})
		if err := rt.Create(ctx, id, dir, runtime.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer rt.Delete(ctx, id)
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		if res, err := rt.Exec(ctx, id, runtime.Process{Args: []string{"/counter", "await", "get"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("actor %s not ready: %v %s", id, err, res.Stderr)
		}
		snap := filepath.Join(base, "snap-"+id)
		if _, err := eng.Suspend(ctx, engine.Actor{ID: id, Bundle: dir}, engine.SuspendOptions{Dir: snap}); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	a := image("a", "1")
	sizeA := folderSize(a)

	be, err := local.New(filepath.Join(base, "repo"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	timed(t, &rows, "ingest actor a into the local store", sizeA, "", func() error { _, err := archiver.Save(ctx, repo, "a", a, archiver.Options{}); return err })
	b := image("b", "2")
	timed(t, &rows, "ingest actor b (same template)", folderSize(b), "", func() error { _, err := archiver.Save(ctx, repo, "b", b, archiver.Options{}); return err })
	os.RemoveAll(b)
	u, err := repo.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dedup: %s logical, %s stored, %.2fx", units.Bytes(u.Logical), units.Bytes(u.Stored), u.Dedup)
	rows = append(rows, row{What: "two actors of one template: logical / stored", Bytes: u.Stored, Note: fmt.Sprintf("%s / %s = %.2fx", units.Bytes(u.Logical), units.Bytes(u.Stored), u.Dedup)})

	out := filepath.Join(base, "restored")
	timed(t, &rows, "restore a from the local store (fetch, verify, write)", sizeA, "", func() error { return archiver.Restore(ctx, repo, "a", out, archiver.Options{}) })
	os.RemoveAll(out)
	os.RemoveAll(filepath.Join(base, "repo"))

	srv := s3test.Start(t)
	sbe, err := location.Open(ctx, srv.Location("bench"), srv.Env)
	if err != nil {
		t.Fatal(err)
	}
	srepo, err := store.Init(ctx, sbe)
	if err != nil {
		t.Fatal(err)
	}
	timed(t, &rows, "ingest a into S3 (versitygw on loopback)", sizeA, "", func() error { _, err := archiver.Save(ctx, srepo, "a", a, archiver.Options{}); return err })
	os.RemoveAll(a)
	timed(t, &rows, "restore a from S3 (versitygw on loopback)", sizeA, "", func() error { return archiver.Restore(ctx, srepo, "a", out, archiver.Options{}) })

	fmt.Println("| step | size | seconds | MB/s | note |\n|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %.1f | %.0f | %s |\n", r.What, units.Bytes(r.Bytes), r.Seconds, r.MBps, r.Note)
	}
	if dir := os.Getenv("STASIS_BENCH_OUT"); dir != "" {
		data, _ := json.MarshalIndent(rows, "", "  ")
		_ = os.WriteFile(filepath.Join(dir, "storebench.json"), data, 0o644)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// TestMain removes, after the benchmarks, what they built to run in
// sandboxes.
func TestMain(m *testing.M) { testactor.Main(m) }
