package gvisor

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
)

// OpenFiles lists the files of container id's root file system and
// mounts that its sandbox holds open. With runsc's direct file system
// access (its default) the sandbox process itself holds a descriptor for
// each file it has looked up; a descriptor's target is read in the
// sandbox's own mount namespace, where the container's root is a folder
// of runsc's choosing: each is kept as the path inside the container
// under which the bundle's spec finds the same file on the host (the same
// device and inode), and left out where none does.
func (r *Runsc) OpenFiles(ctx context.Context, id string) ([]string, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return nil, err
	}
	if st.PID <= 0 {
		return nil, fmt.Errorf("container %s has no sandbox process", id)
	}
	spec, err := bundle.Load(st.Bundle)
	if err != nil {
		return nil, err
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", st.PID)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("the open files of container %s: %w", id, err)
	}
	seen := map[string]bool{}
	var files []string
	for _, fd := range fds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		link := filepath.Join(fdDir, fd.Name())
		target, err := os.Readlink(link)
		if err != nil || !path.IsAbs(target) || path.Clean(target) != target {
			continue // a pipe, a socket, an anonymous inode, or closed since
		}
		var held unix.Stat_t
		if err := unix.Stat(link, &held); err != nil {
			continue
		}
		for _, inside := range insideCandidates(target) {
			if seen[inside] {
				break
			}
			if sameFile(bundle.HostPathOf(spec, st.Bundle, inside), &held) {
				seen[inside] = true
				files = append(files, inside)
				break
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

// insideCandidates are the paths inside the container that a descriptor's
// target in the sandbox's mount namespace may be: the target itself, and
// the target below its first folder (where runsc mounts the container's
// root: /root).
func insideCandidates(target string) []string {
	if i := strings.IndexByte(target[1:], '/'); i >= 0 {
		return []string{target, target[1+i:]}
	}
	return []string{target}
}

// sameFile tells whether host path p is the file held (following a
// symbolic link at p, or not).
func sameFile(p string, held *unix.Stat_t) bool {
	if p == "" {
		return false
	}
	var st unix.Stat_t
	if unix.Lstat(p, &st) == nil && st.Dev == held.Dev && st.Ino == held.Ino {
		return true
	}
	return unix.Stat(p, &st) == nil && st.Dev == held.Dev && st.Ino == held.Ino
}

// Prefetch starts reading runsc's binary into the page cache: a restore
// runs code of it that no sandbox running here has paged in.
func (r *Runsc) Prefetch() error {
	f, err := os.Open(r.path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED); err != nil {
		return &os.PathError{Op: "fadvise", Path: r.path, Err: err}
	}
	return nil
}
