package fsutil

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/tick"
)

// BenchmarkWriteback times a checkpoint's image made durable: one writer
// appends STASIS_WRITEBACK_GIB (default 0.25) GiB to a file in 256 KiB
// writes, as runsc writes its pages file, under STASIS_WRITEBACK_DIR
// (default a temporary folder: put it on the disk snapshots go to), then the
// file is fsynced. The ways differ in what asks the disk to write while the
// writer runs. It reports the writer's time, the fsync's, and their sum as
// GB/s; beside them, the floor: the same bytes written with O_DIRECT.
//
//	STASIS_WRITEBACK_GIB=8 STASIS_WRITEBACK_DIR=/var/lib/stasis go test -run '^$' -bench Writeback -benchtime 2x ./internal/fsutil
func BenchmarkWriteback(b *testing.B) {
	size := int64(benchGiB(b, "STASIS_WRITEBACK_GIB", 0.25)*(1<<30)) / writeChunk * writeChunk
	dir := benchDir(b, "STASIS_WRITEBACK_DIR")
	ways := []struct {
		name  string
		start func(dir string) (stop func())
	}{
		{"none", func(string) func() { return func() {} }},
		{"periodic-100ms", func(dir string) func() { return StartWriteback(dir, 100*time.Millisecond) }},
		{"periodic-10ms", func(dir string) func() { return StartWriteback(dir, 10*time.Millisecond) }},
		{"follow", func(dir string) func() { return followWriteback(dir, false) }},
		{"follow-wait", func(dir string) func() { return followWriteback(dir, true) }},
	}
	buf := AlignedBuffer(writeChunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for _, way := range ways {
		b.Run(way.name, func(b *testing.B) {
			var write, sync time.Duration
			for range b.N {
				w, s := timeDurableWrite(b, dir, size, buf, 0, way.start)
				write, sync = write+w, sync+s
			}
			report(b, size, write, sync)
		})
	}
	b.Run("direct-floor", func(b *testing.B) {
		var write, sync time.Duration
		for range b.N {
			w, s := timeDurableWrite(b, dir, size, buf, unix.O_DIRECT, nil)
			write, sync = write+w, sync+s
		}
		report(b, size, write, sync)
	})
}

const writeChunk = 256 << 10

// benchGiB is the GiB the setting key asks for, def when unset.
func benchGiB(b *testing.B, key string, def float64) float64 {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	gib, err := strconv.ParseFloat(v, 64)
	if err != nil {
		b.Fatalf("%s=%q: %v", key, v, err)
	}
	return gib
}

// benchDir is the folder the setting key names, a temporary one when
// unset.
func benchDir(b *testing.B, key string) string {
	if dir := os.Getenv(key); dir != "" {
		return dir
	}
	return b.TempDir()
}

func report(b *testing.B, size int64, write, sync time.Duration) {
	n := float64(b.N)
	b.ReportMetric(write.Seconds()/n, "write-s")
	b.ReportMetric(sync.Seconds()/n, "fsync-s")
	b.ReportMetric(float64(size)/((write+sync).Seconds()/n)/1e9, "GB/s")
}

// timeDurableWrite writes size bytes of buf, writeChunk at a time, into a
// new file under dir/image with start's writeback running, then fsyncs it.
func timeDurableWrite(b *testing.B, dir string, size int64, buf []byte, flags int, start func(string) func()) (write, sync time.Duration) {
	image := filepath.Join(dir, "image")
	if err := os.RemoveAll(image); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(image, 0o700); err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(image)
	_ = DropPageCache() // as root: start from no dirty pages of earlier runs
	f, err := os.OpenFile(filepath.Join(image, "pages.img"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|flags, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	stop := func() {}
	if start != nil {
		stop = start(image)
	}
	t := time.Now()
	for off := int64(0); off < size; off += writeChunk {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	write = time.Since(t)
	stop()
	t = time.Now()
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return write, time.Since(t)
}

// followWriteback is a candidate: every 10 ms it asks for the writeback of
// what each file under dir grew by since the last pass, whole 8 MiB ranges
// only; with wait it also waits for ranges 64 MiB behind to be written.
func followWriteback(dir string, wait bool) (stop func()) {
	f, err := os.Open(filepath.Join(dir, "pages.img"))
	if err != nil {
		return func() {}
	}
	const step, behind = 8 << 20, 64 << 20
	var submitted, waited int64
	stopPasses := tick.Every(context.Background(), 10*time.Millisecond, func() {
		st, err := f.Stat()
		if err != nil {
			return
		}
		end := st.Size() / step * step
		if end > submitted {
			_ = unix.SyncFileRange(int(f.Fd()), submitted, end-submitted, unix.SYNC_FILE_RANGE_WRITE)
			submitted = end
		}
		if wait && submitted-behind > waited {
			_ = unix.SyncFileRange(int(f.Fd()), waited, submitted-behind-waited, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
			waited = submitted - behind
		}
	})
	return func() {
		stopPasses()
		f.Close()
	}
}
