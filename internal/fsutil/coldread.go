package fsutil

import (
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DropPageCache writes back what is dirty, then asks the kernel to drop its
// page cache (as root), so that what is read next comes off the disk (the
// benchmarks' cold reads) and no write-back of earlier work (a push, a pull
// not synced) shares the disk with what is measured next.
func DropPageCache() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200)
}

// ColdRead drops the page cache, then reads every file, streams files at
// once and 16 MiB at a time, and says how long the reads took: the disk's
// own speed, the floor a benchmark measures beside what it benchmarks.
func ColdRead(files []string, streams int) (time.Duration, error) {
	if err := DropPageCache(); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := readFiles(files, streams); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// readFiles reads every file to its end, streams files at once; the error
// is the first that a file gave.
func readFiles(files []string, streams int) error {
	next := make(chan string)
	var (
		mu       sync.Mutex
		firstErr error
	)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			buf := make([]byte, 16<<20)
			for p := range next {
				f, err := os.Open(p)
				if err != nil {
					// Recorded, not sent: a channel would fill once more
					// files than streams failed, and the reads would stop.
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				for {
					if n, err := f.Read(buf); n == 0 || err != nil {
						break
					}
				}
				f.Close()
			}
		})
	}
	for _, p := range files {
		next <- p
	}
	close(next)
	wg.Wait()
	return firstErr
}

// RegularFiles lists the regular files under dir.
func RegularFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	return out, err
}
