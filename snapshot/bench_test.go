package snapshot_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/snapshot"
)

// benchSize is the image file the benchmarks commit and verify. Run with
// `go test -bench . -benchtime 3x ./snapshot`; throughput is in MB/s.
const benchSize = 1 << 30

func benchFolder(b *testing.B) string {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, "pages.img"))
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8<<20)
	if _, err := rand.Read(buf); err != nil {
		b.Fatal(err)
	}
	for written := 0; written < benchSize; written += len(buf) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkCommit measures the sync, hash and manifest write of a fresh
// 1 GiB image, the commit step of a suspend.
func BenchmarkCommit(b *testing.B) {
	b.SetBytes(benchSize)
	for b.Loop() {
		b.StopTimer()
		dir := benchFolder(b)
		b.StartTimer()
		if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify measures reading and hashing a committed 1 GiB image (from
// the page cache), the verify step of a resume.
func BenchmarkVerify(b *testing.B) {
	dir := benchFolder(b)
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchSize)
	for b.Loop() {
		if _, err := snapshot.Verify(context.Background(), dir); err != nil {
			b.Fatal(err)
		}
	}
}
