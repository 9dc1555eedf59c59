package fsutil

import (
	"fmt"
	"os"
	"unsafe"

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
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&pm.resident[0]))); errno != 0 {
		return PageMap{}, fmt.Errorf("mincore: %w", errno)
	}
	return pm, nil
}

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
