// Package prefault reads the memory of checkpointed CUDA processes before
// the driver restores them, so that the restore finds it resident.
//
// Inside gVisor a restored sandbox's memory is loaded from the image in the
// background, and the pages the driver's restore copies to the GPU are
// first touched, one fault at a time, by that restore: measured on an H200,
// the GPU step of an 8 GiB actor took about twice the driver's own time
// until its memory had been read once. Reading every writable mapping
// through /proc/PID/mem on many threads makes those faults in parallel.
//
// It only reads: the process runs while it is checkpointed (only its CUDA
// calls wait), so writing its memory, even the same bytes back, could lose a
// write of its own. Reading another process's memory needs ptrace access
// (CAP_SYS_PTRACE, or the same user under a permissive Yama policy). Every
// failure is reported and leaves the restore to fault as before.
package prefault

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// pieceSize is the span one read covers: large enough that a read's fixed
// cost is nothing beside the faults it makes, small enough that the
// workers share a mapping of a few GiB evenly.
const pieceSize = 8 << 20

// Result is what a prefault did, for the helper's report.
type Result struct {
	Processes int           `json:"processes"`
	Mappings  int           `json:"mappings"`
	Bytes     int64         `json:"bytes"`
	Workers   int           `json:"workers"`
	Duration  time.Duration `json:"durationNs"`
	// Failed counts the pieces that could not be read (a mapping that went
	// away, memory the kernel refuses to read), Error the first failure.
	Failed int    `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Mapping is one range of a process's address space.
type Mapping struct {
	Start, End uint64
	Perms      string
	Path       string
}

// Wanted tells whether m is memory a restore may read: readable and
// writable, and not a device's (the GPU's own mappings are not host memory,
// and reading them could fault into the driver).
func (m Mapping) Wanted() bool {
	if len(m.Perms) < 2 || m.Perms[0] != 'r' || m.Perms[1] != 'w' {
		return false
	}
	switch {
	case m.Path == "/dev/zero" || strings.HasPrefix(m.Path, "/dev/zero "):
		return true
	case strings.HasPrefix(m.Path, "/dev/"), m.Path == "[vvar]", m.Path == "[vsyscall]", m.Path == "[vdso]":
		return false
	}
	return true
}

// ReadMaps parses /proc/PID/maps under procRoot.
func ReadMaps(procRoot string, pid int) ([]Mapping, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var maps []Mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, err := parseMapsLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name(), err)
		}
		maps = append(maps, m)
	}
	return maps, sc.Err()
}

// parseMapsLine reads "start-end perms offset dev inode [path]".
func parseMapsLine(line string) (Mapping, error) {
	fields := strings.Fields(line)
	if len(fields) < 5 {
		return Mapping{}, fmt.Errorf("maps line %q: want at least 5 fields", line)
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return Mapping{}, fmt.Errorf("maps line %q: no address range", line)
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err := errors.Join(err1, err2); err != nil || end < start {
		return Mapping{}, fmt.Errorf("maps line %q: bad address range", line)
	}
	m := Mapping{Start: start, End: end, Perms: fields[1]}
	if len(fields) > 5 {
		m.Path = strings.Join(fields[5:], " ")
	}
	return m, nil
}

type piece struct {
	mem        *os.File
	start, len uint64
}

// Processes reads every wanted mapping of each pid, with workers reads at
// once across all of them.
func Processes(ctx context.Context, procRoot string, pids []int, workers int) Result {
	start := time.Now()
	res := Result{Processes: len(pids), Workers: max(1, workers)}
	var firstErr error
	fail := func(err error) {
		res.Failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	var pieces []piece
	for _, pid := range pids {
		maps, err := ReadMaps(procRoot, pid)
		if err != nil {
			fail(err)
			continue
		}
		mem, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "mem"))
		if err != nil {
			fail(fmt.Errorf("open the memory of pid %d (needs ptrace access, CAP_SYS_PTRACE): %w", pid, err))
			continue
		}
		defer mem.Close()
		for _, m := range maps {
			if !m.Wanted() {
				continue
			}
			res.Mappings++
			for at := m.Start; at < m.End; at += pieceSize {
				pieces = append(pieces, piece{mem: mem, start: at, len: min(pieceSize, m.End-at)})
			}
		}
	}
	var (
		next   atomic.Int64
		bytes  atomic.Int64
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed []error
	)
	for range res.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, pieceSize)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(pieces) {
					return
				}
				p := pieces[i]
				n, err := p.mem.ReadAt(buf[:p.len], int64(p.start))
				bytes.Add(int64(n))
				if err != nil {
					mu.Lock()
					failed = append(failed, fmt.Errorf("read %#x+%d of %s: %w", p.start, p.len, p.mem.Name(), err))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range failed {
		fail(err)
	}
	if ctx.Err() != nil {
		fail(ctx.Err())
	}
	res.Bytes = bytes.Load()
	res.Duration = time.Since(start)
	if firstErr != nil {
		res.Error = firstErr.Error()
	}
	return res
}
