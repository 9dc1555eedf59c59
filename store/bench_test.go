package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/store/archiver"
)

// benchMiB is the incompressible folder the benchmarks push and pull: four
// segments, so that every core cuts.
const benchMiB = 1024

// BenchmarkSave measures ingest (chunking, hashing, compression, packing,
// writing) of 1 GiB of incompressible bytes into a fresh local repository:
// `go test -run xxx -bench . -benchtime 3x ./store`.
func BenchmarkSave(b *testing.B) {
	src := makeFolderZeros(b, 0, benchMiB, 7, 0)
	b.SetBytes(benchMiB << 20)
	for b.Loop() {
		b.StopTimer()
		r, _ := newRepo(b)
		b.StartTimer()
		if _, err := archiver.Save(context.Background(), r, "s", src, archiver.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestore measures fetch, decompression, hash checks and writing of
// the same folder from a local repository.
func BenchmarkRestore(b *testing.B) {
	src := makeFolderZeros(b, 0, benchMiB, 7, 0)
	r, _ := newRepo(b)
	if _, err := archiver.Save(context.Background(), r, "s", src, archiver.Options{}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchMiB << 20)
	for b.Loop() {
		if err := archiver.Restore(context.Background(), r, "s", filepath.Join(b.TempDir(), "out"), archiver.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
