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
	page := int64(os.Getpagesize())
	err = ForEachFile(dir, func(path string, f *os.File) error {
		st, err := f.Stat()
		if err != nil || st.Size() == 0 {
			return err
		}
		total += st.Size()
		m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("map %s: %w", path, err)
		}
		defer unix.Munmap(m)
		vec := make([]byte, (st.Size()+page-1)/page)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			return fmt.Errorf("mincore %s: %w", path, errno)
		}
		for i, v := range vec {
			if v&1 != 0 {
				resident += min(page, st.Size()-int64(i)*page)
			}
		}
		return nil
	})
	return resident, total, err
}
