// Package testdisk gives tests small filesystems they can fill: the way to
// meet a full disk for real rather than through a stand-in.
package testdisk

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size (such as "8m") on dir until the test ends.
// It needs root.
func Tmpfs(t testing.TB, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a small tmpfs and needs root")
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// Fill writes path until its filesystem has no block left: in chunks of a
// MiB, then of a page, then of a byte.
func Fill(t testing.TB, path string) {
	t.Helper()
	if err := Filler(path); err != nil {
		t.Fatal(err)
	}
}

// Filler is Fill for a goroutine of a test's: it returns what went wrong.
func Filler(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, size := range []int{1 << 20, 4 << 10, 1} {
		chunk := make([]byte, size)
		for {
			if _, err := f.Write(chunk); err != nil {
				break
			}
		}
	}
	return nil
}
