package fsutil

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := WriteAtomic(path, strings.NewReader("xy"), 3); err == nil || !strings.Contains(err.Error(), "expected 3") {
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
	}{{"short", "expected 9"}, {"much too long", "more than the expected 9"}} {
		err := WriteAtomicDirect(path, strings.NewReader(c.data), 9)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%q as 9 bytes: %v", c.data, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
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
