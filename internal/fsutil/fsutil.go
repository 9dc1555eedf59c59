// Package fsutil holds the file operations that several packages need done
// the same careful way: atomic, durable replacement of a file, and emptying
// a folder.
package fsutil

import (
	"fmt"
	"io"
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
