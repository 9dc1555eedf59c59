// Package initramfs writes the initramfs a micro-VM actor boots: a
// gzip-compressed cpio archive in the kernel's "newc" format whose /init is
// the Stasis guest agent, with the kernel modules, tools and workload files
// the guest needs. The kernel unpacks it into its root tmpfs, so the guest
// needs no disk.
package initramfs

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// newcMagic starts every header of the "new ASCII" cpio format the kernel
// reads (Documentation/driver-api/early-userspace/buffer-format.rst).
const newcMagic = "070701"

const trailer = "TRAILER!!!"

// archive writes cpio entries; every write error sticks, so callers check
// once at the end.
type archive struct {
	w    io.Writer
	ino  uint32
	seen map[string]bool
	err  error
}

func newArchive(w io.Writer) *archive { return &archive{w: w, seen: map[string]bool{}} }

// entry writes one header, the name and the data, each padded to 4 bytes.
func (a *archive) entry(name string, mode uint32, rdevMajor, rdevMinor uint32, data []byte) {
	if a.err != nil {
		return
	}
	if name != trailer {
		clean, err := cleanPath(name)
		if err != nil {
			a.err = err
			return
		}
		if a.seen[clean] {
			a.err = fmt.Errorf("initramfs: %s added twice", clean)
			return
		}
		a.seen[clean] = true
		name = clean
	}
	a.ino++
	nlink := uint32(1)
	if mode&sIFMT == sIFDIR {
		nlink = 2
	}
	fields := []uint32{a.ino, mode, 0, 0, nlink, 0, uint32(len(data)), 0, 0, rdevMajor, rdevMinor, uint32(len(name) + 1), 0}
	var hdr strings.Builder
	hdr.WriteString(newcMagic)
	for _, f := range fields {
		fmt.Fprintf(&hdr, "%08X", f)
	}
	hdr.WriteString(name)
	hdr.WriteByte(0)
	a.write([]byte(hdr.String()))
	a.pad(hdr.Len())
	a.write(data)
	a.pad(len(data))
}

func (a *archive) write(p []byte) {
	if a.err == nil {
		_, a.err = a.w.Write(p)
	}
}

func (a *archive) pad(n int) {
	if r := n % 4; r != 0 {
		a.write(make([]byte, 4-r))
	}
}

func (a *archive) close() error {
	a.entry(trailer, 0, 0, 0, nil)
	return a.err
}

// Mode bits of the cpio header (the kernel's stat mode).
const (
	sIFMT  = 0o170000
	sIFDIR = 0o040000
	sIFREG = 0o100000
	sIFLNK = 0o120000
	sIFCHR = 0o020000
)

func perm(m fs.FileMode) uint32 { return uint32(m.Perm()) }

// cleanPath makes an archive path relative to the guest's root, refusing
// one that would leave it.
func cleanPath(p string) (string, error) {
	if strings.Contains(p, "\x00") || slices.Contains(strings.Split(p, "/"), "..") {
		return "", fmt.Errorf("initramfs: path %q leaves the guest's root", p)
	}
	clean := strings.TrimPrefix(path.Clean("/"+p), "/")
	if clean == "" {
		return "", fmt.Errorf("initramfs: empty path %q", p)
	}
	return clean, nil
}
