package fsutil

import (
	"os"
	"path/filepath"
	"sync"
	"time"
)

// DropPageCache asks the kernel to drop its clean page cache (as root), so
// that what is read next comes off the disk: the benchmarks' cold reads.
func DropPageCache() error {
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
	next := make(chan string)
	errs := make(chan error, streams)
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			buf := make([]byte, 16<<20)
			for p := range next {
				f, err := os.Open(p)
				if err != nil {
					errs <- err
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
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return time.Since(start), nil
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
