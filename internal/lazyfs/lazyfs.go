// Package lazyfs serves a folder whose files are still being written (a
// snapshot being pulled) as a read-only FUSE file system: a read waits for
// the bytes it asks for, which the writer brings ahead of the rest, and is
// then served from the folder. A sandbox can so be restored from a snapshot
// while its pull goes on, its runtime reading the image as it arrives.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Source says when the bytes of a file are in the folder.
type Source interface {
	// Await returns once bytes [off, off+n) of the file at path (a slash
	// path relative to the folder) are written and checked, or with the
	// reason they never will be.
	Await(ctx context.Context, path string, off, n int64) error
}

// Opener is a Source that says where a file's bytes are being written,
// when not (or not yet) in the folder: the view reads a file opened
// through it from Open (a file filled in memory first).
type Opener interface {
	Open(path string) (Reader, error)
}

// Reader is a file the view reads from: an *os.File, or what an Opener
// opens.
type Reader interface {
	io.ReaderAt
	io.Closer
}

// File is one file the view shows: its slash path in the folder, its size
// (the size it has once whole) and its permission bits. Direct serves it
// without the kernel's page cache: for a file its reader reads in large
// requests (a memory image), each then passed to the server whole rather
// than in read-ahead pieces, and not cached twice. A file read in small
// pieces (a runtime's state file) is better read ahead.
type File struct {
	Path   string
	Size   int64
	Mode   os.FileMode
	Direct bool
}

// View is a mounted view of a folder.
type View struct {
	mountpoint string
	// served is closed when the kernel has let go of the file system:
	// nothing can be open through it then (the release of a file closed
	// last can be lost as the kernel tears the connection down).
	served chan struct{}

	mu      sync.Mutex
	open    int           // file handles open
	changed chan struct{} // closed, and replaced, when open changes
}

// maxRequest is the largest read the kernel sends at once (its limit).
const maxRequest = 1 << 20

// Mount shows files of folder at mountpoint, an empty folder, each read
// waiting on src. The view is read-only; its files are open to root only
// (mountpoint's parent should be private). It fails where FUSE is not
// available (no /dev/fuse, not root): the caller then reads the folder
// once it is whole.
func Mount(mountpoint, folder string, files []File, src Source) (*View, error) {
	root := &dirNode{}
	v := &View{mountpoint: mountpoint, changed: make(chan struct{}), served: make(chan struct{})}
	for _, f := range files {
		if !iofs.ValidPath(f.Path) || f.Path == "." {
			return nil, fmt.Errorf("lazyfs: %q is not a clean relative path", f.Path)
		}
	}
	timeout := time.Hour // nothing in the view changes while it is mounted
	server, err := fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			FsName:            "stasis-pull",
			Name:              "stasis",
			DirectMountStrict: true,
			AllowOther:        true,
			MaxWrite:          maxRequest,
			DisableXAttrs:     true,
			DisableSplice:     true,
		},
		OnAdd: func(ctx context.Context) {
			for _, f := range files {
				parent := &root.Inode
				dir, name := path.Split(f.Path)
				for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
					if part == "" {
						continue
					}
					child := parent.GetChild(part)
					if child == nil {
						child = parent.NewPersistentInode(ctx, &dirNode{}, fs.StableAttr{Mode: syscall.S_IFDIR})
						parent.AddChild(part, child, false)
					}
					parent = child
				}
				node := &fileNode{view: v, src: src, path: f.Path, backing: filepath.Join(folder, filepath.FromSlash(f.Path)), size: f.Size, mode: uint32(f.Mode.Perm()), direct: f.Direct}
				parent.AddChild(name, parent.NewPersistentInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG}), false)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount at %s: %w", mountpoint, err)
	}
	go func() {
		server.Wait()
		close(v.served)
	}()
	return v, nil
}

// Dir is where the view is mounted.
func (v *View) Dir() string { return v.mountpoint }

// Close takes the view out of the file tree at once (a lazy unmount) and
// waits, until ctx ends, for every file opened through it (a restore's
// image) to be closed, or for the kernel to let go of the view; until then
// they are served. When ctx ends first,
// Close says so, and they are served while this process runs.
//
// The kernel lets go of the file system itself only when no mount
// namespace holds a copy of it: a sandbox made while it was mounted (runsc
// makes its own namespaces) holds one, out of reach, until it exits. Its
// server idles until then.
func (v *View) Close(ctx context.Context) error {
	if err := unix.Unmount(v.mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("lazyfs: unmount %s: %w", v.mountpoint, err)
	}
	for {
		v.mu.Lock()
		open, changed := v.open, v.changed
		v.mu.Unlock()
		if open == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-v.served:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("lazyfs: %s is unmounted, and %d file(s) opened through it are still open: they are served until closed", v.mountpoint, open)
		}
	}
}

// opened counts a handle opened (+1) or released (-1).
func (v *View) opened(delta int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.open += delta
	close(v.changed)
	v.changed = make(chan struct{})
}

// Drop takes every view left mounted under dir out of the file tree (a
// process that served them is gone) and removes its folder, and says which
// were there.
func Drop(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	for _, e := range entries {
		names = append(names, e.Name())
		p := filepath.Join(dir, e.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
			continue
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return names, errors.Join(errs...)
}

type dirNode struct {
	fs.Inode
}

var _ fs.NodeGetattrer = (*dirNode)(nil)

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o700
	return 0
}

type fileNode struct {
	fs.Inode
	view    *View
	src     Source
	path    string
	backing string
	size    int64
	mode    uint32
	direct  bool
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
)

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | n.mode
	out.Size = uint64(n.size)
	out.Nlink = 1
	return 0
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	var f Reader
	var err error
	if o, ok := n.src.(Opener); ok {
		f, err = o.Open(n.path)
	} else {
		f, err = os.Open(n.backing)
	}
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	n.view.opened(1)
	var fuseFlags uint32
	if n.direct {
		fuseFlags = fuse.FOPEN_DIRECT_IO
	}
	return &handle{node: n, f: f}, fuseFlags, 0
}

type handle struct {
	node *fileNode
	f    Reader
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := h.node
	if off >= n.size {
		return fuse.ReadResultData(nil), 0
	}
	want := min(int64(len(dest)), n.size-off)
	// A signal to the reading thread interrupts the request (the kernel
	// cancels ctx); an EINTR would then fail a read that its caller (the
	// sandbox's loader, whose threads get signals all the time) does not
	// retry. The wait ends when the bytes are there or the pull fails.
	if err := n.src.Await(context.WithoutCancel(ctx), n.path, off, want); err != nil {
		return nil, syscall.EIO
	}
	got, err := h.f.ReadAt(dest[:want], off)
	if int64(got) != want {
		if err == nil {
			err = syscall.EIO
		}
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	defer h.node.view.opened(-1)
	return fs.ToErrno(h.f.Close())
}
