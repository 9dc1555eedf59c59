package fsutil

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Resident counts the bytes of the regular files under dir that are in the
// page cache (mincore of each file mapped read-only; nothing is read), and
// their total size.
func Resident(dir string) (resident, total int64, err error) {
	err = ForEachFile(dir, func(path string, f *os.File) error {
		pages, err := ResidentPages(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		total += pages.Size
		resident += pages.Bytes(0, pages.Size)
		return nil
	})
	return resident, total, err
}

// PageMap says which pages of a file were in the page cache when it was
// taken.
type PageMap struct {
	// Size is the file's size; resident holds one byte a page, its lowest
	// bit set when the page was in the page cache.
	Size     int64
	page     int64
	resident []byte
}

// ResidentPages maps f read-only and asks the kernel which of its pages are
// in the page cache (mincore); nothing is read.
func ResidentPages(f *os.File) (PageMap, error) {
	st, err := f.Stat()
	if err != nil {
		return PageMap{}, err
	}
	pm := PageMap{Size: st.Size(), page: int64(os.Getpagesize())}
	if pm.Size == 0 {
		return pm, nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(pm.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return PageMap{}, fmt.Errorf("map: %w", err)
	}
	defer unix.Munmap(m)
	pm.resident = make([]byte, (pm.Size+pm.page-1)/pm.page)
	// The kernel looks each page up: about 3 ms a GiB, so a large file's
	// pieces are asked for on every core at once.
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for at := int64(0); at < pm.Size; at += residentPiece {
		n := min(residentPiece, pm.Size-at)
		g.Go(func() error {
			if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[at])), uintptr(n), uintptr(unsafe.Pointer(&pm.resident[at/pm.page]))); errno != 0 {
				return fmt.Errorf("mincore: %w", errno)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return PageMap{}, err
	}
	return pm, nil
}

// residentPiece is how much of a file one mincore call asks about (a
// multiple of any page size).
const residentPiece = 1 << 30

// Bytes counts the bytes of [at, at+n) that were in the page cache (none
// in a map that was not taken).
func (pm PageMap) Bytes(at, n int64) int64 {
	if pm.resident == nil {
		return 0
	}
	end := min(at+n, pm.Size)
	var resident int64
	for at < end {
		i := at / pm.page
		next := min((i+1)*pm.page, end)
		if pm.resident[i]&1 != 0 {
			resident += next - at
		}
		at = next
	}
	return resident
}

// Run is a stretch of a file: Len bytes from Off.
type Run struct {
	Off, Len int64
}

// Runs are the stretches of the file whose pages were in the page cache,
// in order (none in a map that was not taken).
func (pm PageMap) Runs() []Run {
	var runs []Run
	for i, r := range pm.resident {
		if r&1 == 0 {
			continue
		}
		at := int64(i) * pm.page
		end := min(at+pm.page, pm.Size)
		if n := len(runs); n > 0 && runs[n-1].Off+runs[n-1].Len == at {
			runs[n-1].Len = end - runs[n-1].Off
			continue
		}
		runs = append(runs, Run{Off: at, Len: end - at})
	}
	return runs
}

// Subtract is what of runs lies outside every run of minus (both in order
// and apart, as Runs returns them).
func Subtract(runs, minus []Run) []Run {
	var out []Run
	j := 0
	for _, r := range runs {
		at, end := r.Off, r.Off+r.Len
		for at < end {
			for j < len(minus) && minus[j].Off+minus[j].Len <= at {
				j++
			}
			if j == len(minus) || minus[j].Off >= end {
				out = append(out, Run{Off: at, Len: end - at})
				break
			}
			if minus[j].Off > at {
				out = append(out, Run{Off: at, Len: minus[j].Off - at})
			}
			at = minus[j].Off + minus[j].Len
		}
	}
	return out
}

// OpenRegular opens path read-only if it is a regular file, refusing a
// symbolic link as its last element and never blocking on a FIFO or a
// device: for files a caller reads because something recorded their paths.
func OpenRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, nil
}
