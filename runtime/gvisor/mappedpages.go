package gvisor

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime"
)

// mappedGap is the widest hole, in pages, between two mapped ranges of a
// file that are kept as one: reading a few pages more costs a disk less
// than another request.
const mappedGap = 32

// MappedPages lists the ranges of the files of container id's root file
// system and mounts that its sandbox has mapped and in memory. runsc maps
// a file that the application maps into the host process that holds the
// application's address space (systrap's stubs, children of the sandbox
// process) with the file's own descriptor, and the host kernel maps the
// pages in as the application touches them: the pages present in those
// processes' page tables (/proc/PID/pagemap) are the ones the application
// has used. Each file is named as OpenFiles names it, and left out where
// the bundle finds no file with the same device and inode.
func (r *Runsc) MappedPages(ctx context.Context, id string) ([]runtime.MappedFile, error) {
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
	pids, err := descendants(st.PID)
	if err != nil {
		return nil, fmt.Errorf("the processes of container %s: %w", id, err)
	}
	page := int64(os.Getpagesize())
	files := map[fileID]*mappedFile{}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		maps, err := fileMappings(pid)
		if err != nil {
			continue // gone since
		}
		for _, m := range maps {
			f, ok := files[m.file]
			if !ok {
				f = &mappedFile{inside: insidePath(spec, st.Bundle, m.path, m.file)}
				files[m.file] = f
			}
			if f.inside == "" {
				continue
			}
			if f.pages, err = presentPages(pid, m, page, f.pages); err != nil {
				break // gone since
			}
		}
	}
	var out []runtime.MappedFile
	for _, f := range files {
		if f.inside == "" || len(f.pages) == 0 {
			continue
		}
		ranges := mergeRanges(f.pages, mappedGap)
		mf := runtime.MappedFile{Path: f.inside, Ranges: make([][2]int64, len(ranges))}
		for i, r := range ranges {
			mf.Ranges[i] = [2]int64{r[0] * page, (r[1] - r[0]) * page}
		}
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b runtime.MappedFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// fileID is a file on the host: its device and inode.
type fileID struct{ dev, ino uint64 }

// mappedFile is a file's path inside the container ("" where the bundle
// finds no such file) and its present pages, as runs of page indexes
// [first, end).
type mappedFile struct {
	inside string
	pages  [][2]int64
}

// mapping is one file mapping of a process: its address range, the offset
// in the file of its start, and the file.
type mapping struct {
	start, end, offset uint64
	file               fileID
	path               string
}

// fileMappings reads /proc/pid/maps for its mappings of files.
func fileMappings(pid int) ([]mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, ok := parseMapping(sc.Text()); ok {
			out = append(out, m)
		}
	}
	return out, sc.Err()
}

// parseMapping reads one line of /proc/PID/maps ("start-end perms offset
// major:minor inode path"), ok for a mapping of a file that still has
// its name.
func parseMapping(line string) (mapping, bool) {
	fields := strings.SplitN(line, " ", 6)
	if len(fields) < 6 {
		return mapping{}, false
	}
	p := strings.TrimLeft(fields[5], " ")
	if !path.IsAbs(p) || strings.HasSuffix(p, " (deleted)") {
		return mapping{}, false
	}
	var m mapping
	m.path = p
	start, end, ok := strings.Cut(fields[0], "-")
	major, minor, ok2 := strings.Cut(fields[3], ":")
	if !ok || !ok2 {
		return mapping{}, false
	}
	var err [6]error
	m.start, err[0] = strconv.ParseUint(start, 16, 64)
	m.end, err[1] = strconv.ParseUint(end, 16, 64)
	m.offset, err[2] = strconv.ParseUint(fields[2], 16, 64)
	var maj, mnr uint64
	maj, err[3] = strconv.ParseUint(major, 16, 32)
	mnr, err[4] = strconv.ParseUint(minor, 16, 32)
	m.file.ino, err[5] = strconv.ParseUint(fields[4], 10, 64)
	for _, e := range err {
		if e != nil {
			return mapping{}, false
		}
	}
	if m.file.ino == 0 || m.end <= m.start {
		return mapping{}, false
	}
	m.file.dev = unix.Mkdev(uint32(maj), uint32(mnr))
	return m, true
}

// insidePath is the path inside the container under which the bundle
// finds file, mapped at target in the sandbox's mount namespace; "" where
// it finds none.
func insidePath(spec *specs.Spec, bundleDir, target string, file fileID) string {
	held := unix.Stat_t{Dev: file.dev, Ino: file.ino}
	for _, inside := range insideCandidates(target) {
		if sameFile(bundle.HostPathOf(spec, bundleDir, inside), &held) {
			return inside
		}
	}
	return ""
}

// pagemapEntries is how many of /proc/PID/pagemap's entries are read at
// once (8 bytes each).
const pagemapEntries = 1 << 16

// presentPages adds to runs the pages of m present in process pid's page
// tables, as runs of page indexes of the file.
func presentPages(pid int, m mapping, page int64, runs [][2]int64) ([][2]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return runs, err
	}
	defer f.Close()
	buf := make([]byte, 8*pagemapEntries)
	first := int64(m.start) / page
	n := int64(m.end-m.start) / page
	fileFirst := int64(m.offset) / page
	open := int64(-1) // the first page of the run being read, -1 when none
	for done := int64(0); done < n; {
		chunk := min(n-done, pagemapEntries)
		b := buf[:8*chunk]
		if _, err := f.ReadAt(b, (first+done)*8); err != nil && err != io.EOF {
			return runs, err
		}
		for i := range chunk {
			present := binary.LittleEndian.Uint64(b[8*i:])>>63 == 1
			at := fileFirst + done + i
			switch {
			case present && open < 0:
				open = at
			case !present && open >= 0:
				runs = append(runs, [2]int64{open, at})
				open = -1
			}
		}
		done += chunk
	}
	if open >= 0 {
		runs = append(runs, [2]int64{open, fileFirst + n})
	}
	return runs, nil
}

// mergeRanges sorts runs of page indexes [first, end) and joins those
// that overlap or lie at most gap pages apart.
func mergeRanges(runs [][2]int64, gap int64) [][2]int64 {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b [2]int64) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	var out [][2]int64
	for _, r := range runs {
		if n := len(out); n > 0 && r[0] <= out[n-1][1]+gap {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// descendants lists process pid and every process below it.
func descendants(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid …": comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}
