package fsutil

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
}
