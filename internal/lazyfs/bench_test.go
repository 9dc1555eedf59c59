package lazyfs_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/internal/lazyfs"
)

// open is a Source whose bytes are all there.
type open struct{}

func (open) Await(context.Context, string, int64, int64) error { return nil }

// BenchmarkViewRead reads a file through the view as runsc loads a memory
// image: 1 MiB reads (the view's largest) from 4 threads, the folder's
// file in the page cache. core-s/GB is the CPU the reads and the view
// together spent (both are this process).
func BenchmarkViewRead(b *testing.B) {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		b.Skipf("FUSE is not available here (%v)", err)
	}
	f.Close()
	const size = 1 << 30
	folder, mnt := b.TempDir(), b.TempDir()
	if err := os.WriteFile(filepath.Join(folder, "pages.img"), make([]byte, size), 0o600); err != nil {
		b.Fatal(err)
	}
	v, err := lazyfs.Mount(mnt, folder, []lazyfs.File{{Path: "pages.img", Size: size, Mode: 0o600, Direct: true}}, open{})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close(context.Background())
	b.SetBytes(size)
	cpuBefore := cpuTime(b)
	for b.Loop() {
		r, err := os.Open(filepath.Join(mnt, "pages.img"))
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 1<<20)
				for off := int64(w) << 20; off < size; off += 4 << 20 {
					if _, err := r.ReadAt(buf, off); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		r.Close()
	}
	b.ReportMetric((cpuTime(b)-cpuBefore).Seconds()/(float64(b.N)*size/1e9), "core-s/GB")
}

// cpuTime is the CPU this process has spent, in user and kernel mode.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
