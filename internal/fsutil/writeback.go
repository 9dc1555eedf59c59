package fsutil

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/tick"
)

// StartWriteback has the kernel start writing to disk what another process
// (a checkpointing runtime) writes into the files under dir, every interval
// until the returned stop is called, so that the fsync that makes them
// durable afterwards finds most of it written. It only asks for writeback
// (sync_file_range SYNC_FILE_RANGE_WRITE): it never waits for the disk,
// never changes a file, and files it cannot open are skipped. stop waits for
// the last pass to end.
func StartWriteback(dir string, interval time.Duration) (stop func()) {
	return tick.Every(context.Background(), interval, func() { writebackPass(dir) })
}

func writebackPass(dir string) {
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		_ = Writeback(f)
		return nil
	})
}

// Writeback has the kernel start writing f's dirty pages to disk, without
// waiting for them (sync_file_range SYNC_FILE_RANGE_WRITE).
func Writeback(f *os.File) error {
	return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
