// Package procfs reads /proc: the process tree (which host processes belong
// to a sandbox, whether a named daemon runs), a process's memory fields and
// the memory figures of /proc/meminfo and of a process's cgroup.
package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Proc is one process.
type Proc struct {
	PID  int
	PPID int
	Comm string
	// CPUTicks is the clock ticks its threads have run, user and system
	// (utime and stime; 0 where the stat line stops before them).
	CPUTicks uint64
}

// List reads every process under dir (normally /proc). Processes that exit
// while it reads are skipped.
func List(dir string) ([]Proc, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var procs []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		p, err := parseStat(pid, string(data))
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// parseStat reads "pid (comm) state ppid ...". The command name may hold
// spaces and parentheses, so it runs to the last ')'.
func parseStat(pid int, stat string) (Proc, error) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return Proc{}, fmt.Errorf("process %d: malformed stat %q", pid, stat)
	}
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 2 {
		return Proc{}, fmt.Errorf("process %d: malformed stat %q", pid, stat)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return Proc{}, fmt.Errorf("process %d: parent pid %q: %w", pid, fields[1], err)
	}
	p := Proc{PID: pid, PPID: ppid, Comm: stat[open+1 : end]}
	// After the name: state, ppid, ..., utime (12th), stime (13th).
	if len(fields) >= 13 {
		for _, f := range fields[11:13] {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return Proc{}, fmt.Errorf("process %d: CPU ticks %q: %w", pid, f, err)
			}
			p.CPUTicks += n
		}
	}
	return p, nil
}

// Tree is root and every process descended from it.
func Tree(procs []Proc, root int) map[int]bool {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.PPID] = append(children[p.PPID], p.PID)
	}
	tree := map[int]bool{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if tree[pid] {
			continue
		}
		tree[pid] = true
		queue = append(queue, children[pid]...)
	}
	return tree
}

// WithCommPrefix lists the processes whose command name starts with prefix.
func WithCommPrefix(procs []Proc, prefix string) []Proc {
	var found []Proc
	for _, p := range procs {
		if strings.HasPrefix(p.Comm, prefix) {
			found = append(found, p)
		}
	}
	return found
}

// StatusBytes reads a memory field of /proc/PID/status, such as "VmRSS" or
// "VmHWM", in bytes.
func StatusBytes(dir string, pid int, field string) (uint64, error) {
	data, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d: %s %q: %w", pid, field, v, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("process %d: no %s in its status", pid, field)
}

// Meminfo reads a meminfo file (/proc/meminfo) into bytes by field name,
// such as "MemTotal"; fields counted in other units than kB are left out.
func Meminfo(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fields := map[string]uint64{}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		v, isKB := strings.CutSuffix(strings.TrimSpace(rest), " kB")
		if !ok || !isKB {
			continue
		}
		if kib, err := strconv.ParseUint(v, 10, 64); err == nil {
			fields[name] = kib << 10
		}
	}
	if fields["MemTotal"] == 0 {
		return nil, fmt.Errorf("%s: no MemTotal", path)
	}
	return fields, nil
}

// CgroupMemoryRoom says how much more memory the cgroup of process pid may
// charge before its limit: its limit less its use, read under cgroupRoot
// (normally /sys/fs/cgroup) for the cgroup dir/PID/cgroup names: v2's
// memory.max and memory.current, or v1's memory controller. limited is
// false when the cgroup has no limit, or no cgroup is there to read.
func CgroupMemoryRoom(dir, cgroupRoot string, pid int) (room uint64, limited bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return 0, false, err
	}
	var folder, maxName, usedName string
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			folder, maxName, usedName = filepath.Join(cgroupRoot, "memory", filepath.FromSlash(parts[2])), "memory.limit_in_bytes", "memory.usage_in_bytes"
			break
		}
		if parts[0] == "0" && parts[1] == "" {
			folder, maxName, usedName = filepath.Join(cgroupRoot, filepath.FromSlash(parts[2])), "memory.max", "memory.current"
		}
	}
	if folder == "" {
		return 0, false, nil
	}
	read := func(name string) (uint64, bool, error) {
		b, err := os.ReadFile(filepath.Join(folder, name))
		if os.IsNotExist(err) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("cgroup %s: %s %q: %w", folder, name, v, err)
		}
		return n, true, nil
	}
	limit, ok, err := read(maxName)
	// v1 says "no limit" by a limit near 2^63.
	if err != nil || !ok || limit >= 1<<62 {
		return 0, false, err
	}
	used, ok, err := read(usedName)
	if err != nil || !ok {
		return 0, false, err
	}
	if used >= limit {
		return 0, true, nil
	}
	return limit - used, true, nil
}
