// Package fsutil holds the file operations that several packages need done
// the same careful way: atomic, durable replacement of a file, copying a
// file, and emptying a folder.
package fsutil

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix starts the names of the temporary files WriteAtomic makes. A
// crash can leave one beside its target; folder walkers skip them.
const TempPrefix = ".tmp-"

// WriteAtomic writes size bytes from r to path through a temporary file in
// the same folder, synced and renamed into place, then syncs the folder: path
// holds its old content or all of the new, never part of it, and the new
// content survives a crash once WriteAtomic returns.
func WriteAtomic(path string, r io.Reader, size int64) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, TempPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if err == nil && n != size {
		err = fmt.Errorf("wrote %d bytes, expected %d", n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// CopyFile copies src to dst, a new file with mode. The copy is not
// synced: callers that need it durable sync it (a snapshot's commit does).
func CopyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// SyncDir makes the entries of dir (files created, renamed, removed) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// RemoveContents deletes everything inside dir and keeps dir itself.
func RemoveContents(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
