package fsutil

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkCopyInto times writers putting STASIS_COPY_GIB (default 0.5)
// GiB into fresh files in 1 MiB pieces, as a pull writes the chunks it
// decoded: into one file on STASIS_COPY_DIR (default a temporary folder:
// put it on the disk pulled copies go to) through the page cache, not
// synced, by 1, 4 and 16 writers; by 16 writers each into a file of its
// own; into a memfd by pwrite; and into a memfd's memory mapping. It
// reports GB/s and the CPU the writers spent per GB (core-s/GB): writers
// of one file wait for its lock, and on the H200 machine spun on it.
//
//	STASIS_COPY_GIB=8 STASIS_COPY_DIR=/var/lib/stasis go test -run '^$' -bench CopyInto -benchtime 2x ./internal/fsutil
func BenchmarkCopyInto(b *testing.B) {
	const piece = 1 << 20
	size := int(benchGiB(b, "STASIS_COPY_GIB", 0.5)*(1<<30)) / piece * piece
	dir := benchDir(b, "STASIS_COPY_DIR")
	src := make([]byte, piece)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	// run makes files fresh ones (not timed), has writers write the
	// pieces of size bytes across them, and reports.
	run := func(b *testing.B, files, writers int, open func(b *testing.B, size int) *os.File) {
		var took, cpu time.Duration
		for range b.N {
			outs := make([]*os.File, files)
			for i := range outs {
				outs[i] = open(b, size/files)
			}
			c0, t0 := cpuTime(), time.Now()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for k := w; k < size/piece; k += writers {
						f, at := outs[0], k*piece
						if files > 1 {
							f, at = outs[k%files], k/files*piece
						}
						if _, err := f.WriteAt(src, int64(at)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			took, cpu = took+time.Since(t0), cpu+cpuTime()-c0
			for _, f := range outs {
				f.Close()
			}
			// The next round starts with nothing dirty.
			unix.Sync()
		}
		b.ReportMetric(float64(size)*float64(b.N)/took.Seconds()/1e9, "GB/s")
		b.ReportMetric(cpu.Seconds()/(float64(size)*float64(b.N)/1e9), "core-s/GB")
	}
	onDisk := func(b *testing.B, size int) *os.File {
		f, err := os.CreateTemp(dir, "copyinto-")
		if err != nil {
			b.Fatal(err)
		}
		os.Remove(f.Name()) // gone once closed
		if err := f.Truncate(int64(size)); err != nil {
			b.Fatal(err)
		}
		return f
	}
	memfd := func(b *testing.B, size int) *os.File {
		fd, err := unix.MemfdCreate("copyinto", unix.MFD_CLOEXEC)
		if err != nil {
			b.Skipf("no memfd: %v", err)
		}
		f := os.NewFile(uintptr(fd), "memfd")
		if err := f.Truncate(int64(size)); err != nil {
			b.Fatal(err)
		}
		return f
	}
	for _, writers := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("one-file-%d-writers", writers), func(b *testing.B) { run(b, 1, writers, onDisk) })
	}
	b.Run("16-files-16-writers", func(b *testing.B) { run(b, 16, 16, onDisk) })
	b.Run("memfd-pwrite", func(b *testing.B) { run(b, 1, 1, memfd) })
	b.Run("memfd-mapped", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			f := memfd(b, size)
			m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for at := 0; at < size; at += piece {
				copy(m[at:at+piece], src)
			}
			took += time.Since(t0)
			unix.Munmap(m)
			f.Close()
		}
		b.ReportMetric(float64(size)*float64(b.N)/took.Seconds()/1e9, "GB/s")
	})
}

// cpuTime is the CPU this process has run, user and system.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
