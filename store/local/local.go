// Package local stores a repository's objects as files under one folder,
// the embedded default backend. Objects are written with
// fsutil.WriteAtomic (large ones with fsutil.WriteAtomicDirect), so a crash
// never leaves half an object.
package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/store"
)

// Backend is a folder of objects.
type Backend struct {
	root string
	// direct holds the aligned buffers of direct reads, each as large as
	// the largest read it served (a pack's worth and a block either side).
	direct *sync.Pool
	// onNodeDisk says the folder is on a file system of this node's disks,
	// not a network one.
	onNodeDisk bool
}

var _ store.Backend = (*Backend)(nil)

// New uses root, creating it if needed.
func New(root string) (*Backend, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("local store %s: %w", root, err)
	}
	direct := &sync.Pool{New: func() any { return new([]byte) }}
	var st unix.Statfs_t
	onNodeDisk := unix.Statfs(root, &st) == nil && !networkFileSystems[int64(st.Type)]
	return &Backend{root: root, direct: direct, onNodeDisk: onNodeDisk}, nil
}

func (b *Backend) Location() string { return b.root }

// OnNodeDisk says whether the folder is on this node's own disks: false on
// a network file system (a folder store shared by several nodes), whose
// reads cost the network rather than the disks a copy on this node is on.
func (b *Backend) OnNodeDisk() bool { return b.onNodeDisk }

// networkFileSystems are the statfs types of file systems whose files are
// read over a network: NFS, SMB/CIFS, Ceph, 9p, Lustre, GFS2, OCFS2, and
// FUSE (s3fs, gcsfuse and their kin).
var networkFileSystems = map[int64]bool{
	unix.NFS_SUPER_MAGIC: true, unix.SMB_SUPER_MAGIC: true, unix.CIFS_SUPER_MAGIC: true, unix.SMB2_SUPER_MAGIC: true,
	unix.CEPH_SUPER_MAGIC: true, unix.V9FS_MAGIC: true, 0x0bd00bd0: true /* Lustre */, 0x01161970: true, /* GFS2 */
	unix.OCFS2_SUPER_MAGIC: true, unix.FUSE_SUPER_MAGIC: true,
}

// path maps a key to its file, refusing keys that would leave the root.
func (b *Backend) path(key string) (string, error) {
	if err := store.CheckKey(key); err != nil {
		return "", fmt.Errorf("local store %s: %w", b.root, err)
	}
	return filepath.Join(b.root, filepath.FromSlash(key)), nil
}

func (b *Backend) Put(_ context.Context, key string, r io.Reader, size int64) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return b.full(err)
	}
	write := fsutil.WriteAtomic
	if size >= directMin {
		write = fsutil.WriteAtomicDirect
	}
	if err := write(p, r, size); err != nil {
		return b.full(fmt.Errorf("local store: put %s: %w", key, err))
	}
	return nil
}

// full marks a write that failed on a full disk (or quota) as such: not a
// store out of reach, to be tried again, but room to be made.
func (b *Backend) full(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errdefs.Mark(fmt.Errorf("the disk of store %s is full (make room on it): %w", b.root, err), errdefs.ErrResourceExhausted)
	}
	return err
}

// directMin is the size from which objects (packs) are written around the
// page cache: nothing reads a pack right after it is written, and the copy
// into the page cache costs more CPU than chunking it did.
const directMin = 1 << 20

func (b *Backend) Get(_ context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	p, err := b.path(key)
	if err != nil {
		return nil, err
	}
	if length >= directMin {
		if rc, err := b.readDirect(p, offset, length); err == nil || !errors.Is(err, errNoDirect) {
			return rc, notExist(b.root, key, err)
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, notExist(b.root, key, err)
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
	}
	if length < 0 {
		return f, nil
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(f, length), f}, nil
}

func notExist(root, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local store %s: %s: %w", root, key, store.ErrNotExist)
	}
	return err
}

// errNoDirect says the filesystem does not take O_DIRECT (tmpfs).
var errNoDirect = errors.New("O_DIRECT is not supported here")

// directRead is the largest read made around the page cache at once: a
// pack (store.Repository.PackRead: 24 MiB with the default sizes) and a
// block either side, with room for larger packs.
const directRead = 64<<20 + 2*fsutil.DirectBlock

// readDirect reads length bytes of path from offset around the page cache
// (O_DIRECT), in aligned blocks: a pull reads each pack's bytes once, and
// copying them through the page cache cost the 2-core machine more CPU
// than hashing them (docs/benchmarks.md, "Resume anywhere").
func (b *Backend) readDirect(path string, offset, length int64) (io.ReadCloser, error) {
	start := offset &^ (fsutil.DirectBlock - 1)
	end := (offset + length + fsutil.DirectBlock - 1) &^ (fsutil.DirectBlock - 1)
	if end-start > directRead {
		return nil, errNoDirect
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) {
		return nil, errNoDirect
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pooled := b.direct.Get().(*[]byte)
	if len(*pooled) < int(end-start) {
		*pooled = fsutil.AlignedBuffer(int(end - start))
	}
	buf := *pooled
	n := 0
	for n < int(end-start) {
		m, err := f.ReadAt(buf[n:end-start], start+int64(n))
		n += m
		if errors.Is(err, io.EOF) {
			break // the file ends here; fewer bytes is the caller's to judge
		}
		if err != nil {
			// A failing disk is not a short pack: the caller would call
			// it truncated. A read the filesystem refuses direct is made
			// through the page cache instead.
			b.direct.Put(pooled)
			if errors.Is(err, unix.EINVAL) {
				return nil, errNoDirect
			}
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	lo := int(offset - start)
	hi := min(n, lo+int(length))
	if hi < lo {
		hi = lo
	}
	return &directBody{Reader: bytes.NewReader(buf[lo:hi]), buf: pooled, pool: b.direct}, nil
}

type directBody struct {
	*bytes.Reader
	buf  *[]byte
	pool *sync.Pool
}

func (d *directBody) Close() error {
	if d.buf != nil {
		d.pool.Put(d.buf)
		d.buf = nil
	}
	return nil
}

func (b *Backend) Size(_ context.Context, key string) (int64, error) {
	p, err := b.path(key)
	if err != nil {
		return 0, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("local store %s: %s: %w", b.root, key, store.ErrNotExist)
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (b *Backend) List(_ context.Context, prefix string, fn func(string, int64) error) error {
	if err := store.CheckPrefix(prefix); err != nil {
		return fmt.Errorf("local store %s: %w", b.root, err)
	}
	dir := filepath.Join(b.root, filepath.FromSlash(prefix))
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if p == dir && !d.IsDir() {
			// A file where the prefix's folder should be is damage, not an
			// object named by the prefix without its slash.
			return fmt.Errorf("%s is not a folder", p)
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), fsutil.TempPrefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), info.Size())
	})
	if err != nil {
		return fmt.Errorf("local store %s: list %s: %w", b.root, prefix, err)
	}
	return nil
}

func (b *Backend) Delete(_ context.Context, key string) error {
	p, err := b.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local store %s: delete %s: %w", b.root, key, err)
	}
	return nil
}
