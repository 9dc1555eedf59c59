package lazyfs_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/internal/lazyfs"
)

// gate is a Source whose bytes arrive when the test says: Await reports
// that it was asked on asked, then waits for ready (or fails with err).
type gate struct {
	asked chan string
	ready chan struct{}
	once  sync.Once
	err   error
}

func (g *gate) Await(ctx context.Context, path string, off, n int64) error {
	g.once.Do(func() { g.asked <- path })
	select {
	case <-g.ready:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func needFUSE(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("FUSE is not available here (%v): pulls are resumed once whole", err)
	}
	f.Close()
}

func mount(t *testing.T, size int64, direct bool, src lazyfs.Source) (string, *lazyfs.View) {
	t.Helper()
	folder, mnt := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(folder, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(folder, "image", "pages.img"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := lazyfs.Mount(mnt, folder, []lazyfs.File{{Path: "image/pages.img", Size: size, Mode: 0o600, Direct: direct}}, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close(context.Background()) })
	return folder, v
}

// TestReadWaitsForItsBytes: a read through the view waits until the
// source has the bytes, then gives the folder's bytes; a failed source is
// an I/O error; the view cannot be written.
func TestReadWaitsForItsBytes(t *testing.T) {
	needFUSE(t)
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "direct", false: "cached"}[direct], func(t *testing.T) { readWaits(t, direct) })
	}
}

func readWaits(t *testing.T, direct bool) {
	const size = 3<<20 + 100
	g := &gate{asked: make(chan string, 1), ready: make(chan struct{})}
	folder, v := mount(t, size, direct, g)
	through := filepath.Join(v.Dir(), "image", "pages.img")
	if st, err := os.Stat(through); err != nil || st.Size() != size {
		t.Fatalf("stat through the view: %v, %v; want %d bytes", st, err, size)
	}
	got := make(chan []byte, 1)
	go func() {
		b, err := os.ReadFile(through)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	if p := <-g.asked; p != "image/pages.img" {
		t.Fatalf("the source was asked for %q", p)
	}
	select {
	case <-got:
		t.Fatal("the read returned before the source had its bytes")
	default:
	}
	want := bytes.Repeat([]byte("snapshot"), size/8+1)[:size]
	if err := os.WriteFile(filepath.Join(folder, "image", "pages.img"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	close(g.ready)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("read %d bytes through the view, not the folder's %d", len(b), len(want))
	}
	if err := os.WriteFile(through, []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EACCES) {
		t.Fatalf("a write through the view: %v, want it refused", err)
	}

	failed := &gate{asked: make(chan string, 1), ready: make(chan struct{}), err: errors.New("pack gone")}
	close(failed.ready)
	_, v2 := mount(t, 4096, direct, failed)
	if _, err := os.ReadFile(filepath.Join(v2.Dir(), "image", "pages.img")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a read whose bytes never come: %v, want EIO", err)
	}
}

// TestCloseKeepsOpenFilesServed: Close takes the view away at once, and a
// file opened through it before (a restore reading its image) is served
// until it is closed.
func TestCloseKeepsOpenFilesServed(t *testing.T) {
	needFUSE(t)
	g := &gate{asked: make(chan string, 1), ready: make(chan struct{})}
	close(g.ready)
	_, v := mount(t, 8192, true, g)
	f, err := os.Open(filepath.Join(v.Dir(), "image", "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := v.Close(ctx); err == nil {
		t.Fatal("Close with a file open through the view said the view is gone")
	}
	if _, err := os.Stat(filepath.Join(v.Dir(), "image")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Close the view is still in the file tree (%v)", err)
	}
	if n, err := f.ReadAt(make([]byte, 8192), 0); n != 8192 || err != nil {
		t.Fatalf("read of a file opened before Close: %d, %v", n, err)
	}
	f.Close()
	if err := v.Close(context.Background()); err != nil {
		t.Fatalf("Close once the file is closed: %v", err)
	}
}

// TestCloseWhileAnotherNamespaceHoldsACopy: a process that made its own
// mount namespace while the view was mounted (as runsc's sandbox does)
// holds a copy of it until it exits; Close does not wait for that, only
// for the files opened through the view.
func TestCloseWhileAnotherNamespaceHoldsACopy(t *testing.T) {
	needFUSE(t)
	g := &gate{asked: make(chan string, 1), ready: make(chan struct{})}
	close(g.ready)
	_, v := mount(t, 4096, false, g)
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", "echo ready; exec sleep 60")
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	}()
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Close(ctx); err != nil {
		t.Fatalf("Close while another namespace holds a copy of the view: %v", err)
	}
}
