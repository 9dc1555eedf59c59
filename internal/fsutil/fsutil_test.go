package fsutil

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/errdefs"
)

func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteAtomic(path, strings.NewReader("new"), 3); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "new" {
		t.Fatalf("content %q", data)
	}
	// A short source leaves the old content and no temporary file.
	if err := WriteAtomic(path, strings.NewReader("xy"), 3); errdefs.Code(err) != "invalid_argument" || !strings.Contains(err.Error(), "held 2 bytes, 3 were declared") {
		t.Fatalf("short write: %v", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "new" {
		t.Errorf("a failed write changed the file to %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries left; want the file alone", len(entries))
	}
}

func TestRemoveContents(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveContents(dir); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("entries %v, err %v", entries, err)
	}
}

func TestWriteAtomicDirect(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, 4096, 4097, 3<<20 + 5} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + 1)
		}
		path := filepath.Join(dir, "f")
		if err := WriteAtomicDirect(path, bytes.NewReader(data), int64(size)); err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes that differ", size, len(got))
		}
	}
	path := filepath.Join(dir, "f")
	for _, c := range []struct {
		data string
		want string
	}{{"short", "held 5 bytes, 9 were declared"}, {"much too long", "held more, 9 were declared"}} {
		err := WriteAtomicDirect(path, strings.NewReader(c.data), 9)
		if errdefs.Code(err) != "invalid_argument" || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q as 9 bytes: %v", c.data, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

// memory reads a byte slice, counting its reads; Bytes makes it a reader
// over memory that WriteAtomicDirect may write from directly.
type memory struct {
	*bytes.Reader
	b     []byte
	reads int
}

func (m *memory) Read(p []byte) (int, error) { m.reads++; return m.Reader.Read(p) }
func (m *memory) Bytes() []byte              { return m.b[len(m.b)-m.Len():] }

func TestWriteAtomicDirectFromAlignedMemory(t *testing.T) {
	dir := t.TempDir()
	probe, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_WRONLY|unix.O_DIRECT, 0o600)
	direct := err == nil
	if direct {
		probe.Close()
	}
	path := filepath.Join(dir, "f")
	for _, size := range []int{0, 4096, 4097, 1<<20 + 5, 3 << 20} {
		buf := AlignedBuffer(size + 1)
		for i := range buf {
			buf[i] = byte(i*13 + 5)
		}
		for _, c := range []struct {
			name    string
			data    []byte
			inPlace bool
		}{{"aligned", buf[:size], true}, {"unaligned", buf[1 : size+1], false}} {
			m := &memory{Reader: bytes.NewReader(c.data), b: c.data}
			if err := WriteAtomicDirect(path, m, int64(size)); err != nil {
				t.Fatalf("%s, %d bytes: %v", c.name, size, err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, c.data) {
				t.Fatalf("%s, %d bytes: read back %d bytes that differ", c.name, size, len(got))
			}
			// Where the folder takes O_DIRECT, aligned memory goes to disk
			// without being read through the buffer; elsewhere, and for
			// unaligned memory, it is copied.
			if inPlace := c.inPlace && direct; inPlace != (m.reads == 0) && size > 0 {
				t.Errorf("%s, %d bytes, O_DIRECT %v: %d reads", c.name, size, direct, m.reads)
			}
		}
	}
}

func TestMkdirEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := MkdirEmpty(dir); err != nil {
		t.Fatalf("absent folder: %v", err)
	}
	if err := MkdirEmpty(dir); err != nil {
		t.Fatalf("empty folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirEmpty(dir); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("folder with a file: %v, want ErrNotEmpty", err)
	}
}

func TestDescribeType(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	if got := DescribeType(st.Mode()); got != "a symbolic link" {
		t.Errorf("a symlink is described as %q", got)
	}
	if got := DescribeType(0o644); got != "a regular file" {
		t.Errorf("a file is described as %q", got)
	}
}

func TestResident(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pages")
	data := make([]byte, 8<<20+100)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	resident, total, err := Resident(dir)
	if err != nil || total != int64(len(data)) || resident != total {
		t.Fatalf("just written: %d of %d resident, %v; want all", resident, total, err)
	}
	// Dropped from the page cache (clean pages go at once), the file is
	// counted as not resident.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	resident, total, err = Resident(dir)
	if err != nil || total != int64(len(data)) || resident >= total/2 {
		t.Fatalf("dropped: %d of %d resident, %v; want under half", resident, total, err)
	}
	// Its first 3 MiB read again: a map of its pages says so, to the byte
	// of ranges that do not start or end on a page.
	if _, err := f.ReadAt(make([]byte, 3<<20), 0); err != nil {
		t.Fatal(err)
	}
	pages, err := ResidentPages(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := pages.Bytes(100, 3<<20-200); got != 3<<20-200 {
		t.Errorf("%d bytes of the 3 MiB read again are resident, want all %d", got, 3<<20-200)
	}
}

// TestPageMapBytes counts resident bytes of ranges that start and end
// inside pages, and past the file's end.
func TestPageMapBytes(t *testing.T) {
	pm := PageMap{Size: 10000, page: 4096, resident: []byte{1, 0, 1}}
	for _, c := range []struct{ at, n, want int64 }{
		{0, 10000, 4096 + 10000 - 8192},
		{4000, 200, 96},
		{4096, 4096, 0},
		{8000, 5000, 10000 - 8192},
		{9990, 100, 10},
	} {
		if got := pm.Bytes(c.at, c.n); got != c.want {
			t.Errorf("Bytes(%d, %d) = %d, want %d", c.at, c.n, got, c.want)
		}
	}
	if got := (PageMap{Size: 10000}).Bytes(0, 10000); got != 0 {
		t.Errorf("a map not taken counts %d bytes resident, want 0", got)
	}
}

// TestRuns: the resident stretches of a page map, and what of them lies
// outside others.
func TestRuns(t *testing.T) {
	pm := PageMap{Size: 5*4096 + 100, page: 4096, resident: []byte{1, 1, 0, 1, 0, 1}}
	if got, want := pm.Runs(), []Run{{0, 8192}, {3 * 4096, 4096}, {5 * 4096, 100}}; !slices.Equal(got, want) {
		t.Errorf("Runs() = %v, want %v", got, want)
	}
	if got := (PageMap{Size: 100}).Runs(); got != nil {
		t.Errorf("a map not taken has runs %v", got)
	}
	for _, c := range []struct{ runs, minus, want []Run }{
		{[]Run{{0, 100}}, nil, []Run{{0, 100}}},
		{[]Run{{0, 100}}, []Run{{0, 100}}, nil},
		{[]Run{{0, 100}}, []Run{{10, 20}, {50, 10}}, []Run{{0, 10}, {30, 20}, {60, 40}}},
		{[]Run{{0, 100}, {200, 50}}, []Run{{90, 120}}, []Run{{0, 90}, {210, 40}}},
		{[]Run{{100, 10}}, []Run{{0, 50}, {300, 5}}, []Run{{100, 10}}},
	} {
		if got := Subtract(c.runs, c.minus); !slices.Equal(got, c.want) {
			t.Errorf("Subtract(%v, %v) = %v, want %v", c.runs, c.minus, got, c.want)
		}
	}
}

// TestResidentPagesOfALargeFile: a file larger than one mincore piece
// (sparse, two pages written, each in a piece of its own) is mapped to
// the page: its runs are the pages written.
func TestResidentPagesOfALargeFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "large"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := int64(os.Getpagesize())
	size := 2*residentPiece + 5*page
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	written := []Run{{residentPiece + 2*page, page}, {2*residentPiece + 4*page, page}}
	for _, r := range written {
		if _, err := f.WriteAt(bytes.Repeat([]byte{1}, int(r.Len)), r.Off); err != nil {
			t.Fatal(err)
		}
	}
	pages, err := ResidentPages(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := pages.Runs(); !slices.Equal(got, written) {
		t.Fatalf("runs %v, want the pages written %v", got, written)
	}
}

// TestOpenRegular opens a regular file, and refuses a FIFO (without
// blocking on it), a folder and a symbolic link.
func TestOpenRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := OpenRegular(file)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, link} {
		if f, err := OpenRegular(p); err == nil {
			f.Close()
			t.Errorf("OpenRegular(%s) opened it", p)
		}
	}
}

// TestWriteback checks that a pass starts the disk writing a file written
// under the folder: its page cache pages are dirty after the write and
// none is after the pass (the kernel's own page flags, read through
// /proc/self/pagemap and /proc/kpageflags, which need root), with no fsync
// in between. StartWriteback's passes stop when it is stopped.
func TestWriteback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "image", "pages.img")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 32<<20)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dirty, total := dirtyPages(t, path)
	if dirty < total/2 {
		t.Fatalf("only %d of %d pages dirty just after the write", dirty, total)
	}
	writebackPass(dir)
	if dirty, total := dirtyPages(t, path); dirty != 0 {
		t.Fatalf("%d of %d pages still dirty after a writeback pass", dirty, total)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the file changed: %v", err)
	}
	stop := StartWriteback(filepath.Join(dir, "missing"), time.Millisecond)
	stop()
}

// dirtyPages counts the pages of path's page cache that the kernel flags
// dirty, and its pages.
func dirtyPages(t *testing.T, path string) (dirty, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer pagemap.Close()
	flags, err := os.Open("/proc/kpageflags")
	if err != nil {
		t.Fatal(err)
	}
	defer flags.Close()
	page := os.Getpagesize()
	base := uintptr(unsafe.Pointer(&m[0]))
	var entry [8]byte
	for off := 0; off < len(m); off += page {
		// Reading maps the page (pagemap shows only mapped ones); the
		// test's files hold only 7s.
		if m[off] != 7 {
			t.Fatalf("page %d reads %d", off/page, m[off])
		}
		if _, err := pagemap.ReadAt(entry[:], int64((base+uintptr(off))/uintptr(page))*8); err != nil {
			t.Fatal(err)
		}
		e := binary.LittleEndian.Uint64(entry[:])
		pfn := e & (1<<55 - 1)
		if e&(1<<63) == 0 || pfn == 0 {
			t.Fatalf("page %d not mapped, or its frame hidden (pagemap needs root): entry %#x", off/page, e)
		}
		if _, err := flags.ReadAt(entry[:], int64(pfn)*8); err != nil {
			t.Fatal(err)
		}
		total++
		if binary.LittleEndian.Uint64(entry[:])&(1<<4) != 0 { // KPF_DIRTY
			dirty++
		}
	}
	return dirty, total
}

// TestReadFilesReportsFailuresWithoutStopping: more files that cannot be
// opened than streams read them still end in the first error, every file
// looked at, rather than the reads stopping for good.
func TestReadFilesReportsFailuresWithoutStopping(t *testing.T) {
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "gone-1"), filepath.Join(dir, "gone-2"), filepath.Join(dir, "gone-3")}
	there := filepath.Join(dir, "there")
	if err := os.WriteFile(there, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	files = append(files, there)
	done := make(chan error, 1)
	go func() { done <- readFiles(files, 1) }()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "gone-1") {
			t.Fatalf("reading files that are gone: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("readFiles stopped: 3 files that cannot be opened, 1 stream")
	}
}

// TestCopyRange: bytes of one file land at their place in another, what
// is around them untouched, and a source that ends first is an error
// naming it.
func TestCopyRange(t *testing.T) {
	dir := t.TempDir()
	src, err := os.Create(filepath.Join(dir, "src"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	data := make([]byte, 3<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := src.Write(data); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.Truncate(4 << 20); err != nil {
		t.Fatal(err)
	}
	if err := CopyRange(dst, 1<<20+5, src, 1000, 2<<20); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4<<20)
	copy(want[1<<20+5:], data[1000:1000+2<<20])
	if !bytes.Equal(got, want) {
		t.Fatal("the copied range differs, or the bytes around it changed")
	}
	err = CopyRange(dst, 0, src, 3<<20-10, 100)
	if err == nil || !strings.Contains(err.Error(), "src ends at") {
		t.Fatalf("a copy past the source's end: %v; want it named", err)
	}
}

// TestLastLines: the last lines within the bound, a line the bound cuts
// left out, none of an empty file.
func TestLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	for _, c := range []struct {
		content string
		n       int
		within  int64
		want    []string
	}{
		{"", 3, 100, nil},
		{"a\nb\nc\n", 2, 100, []string{"b", "c"}},
		{"a\nb\nc", 5, 100, []string{"a", "b", "c"}},
		{"first line\nsecond\nthird\n", 5, 13, []string{"third"}},
	} {
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LastLines(path, c.n, c.within)
		if err != nil || strings.Join(got, "|") != strings.Join(c.want, "|") || (got == nil) != (c.want == nil) {
			t.Errorf("%q, %d lines within %d: %q %v, want %q", c.content, c.n, c.within, got, err, c.want)
		}
	}
}
