package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseStat(t *testing.T) {
	p, err := parseStat(42, "42 (a (b) c) S 7 42 42 0 -1")
	if err != nil {
		t.Fatal(err)
	}
	if p.PPID != 7 || p.Comm != "a (b) c" {
		t.Fatalf("got %+v, want ppid 7 and comm %q", p, "a (b) c")
	}
	// A whole line: utime 5 and stime 3 are the 14th and 15th fields.
	p, err = parseStat(42, "42 (a (b) c) S 7 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 77")
	if err != nil || p.PPID != 7 || p.CPUTicks != 8 {
		t.Fatalf("got %+v %v, want ppid 7 and 8 CPU ticks", p, err)
	}
	for _, bad := range []string{"", "42 comm S 7", "42 (x) S notanumber", "42 (x) S 7 42 42 0 -1 4194560 100 0 0 0 five 3"} {
		if _, err := parseStat(42, bad); err == nil {
			t.Errorf("stat %q: no error", bad)
		}
	}
}

// TestTreeFindsAChild starts a real child process and finds it under this
// test's own pid.
func TestTreeFindsAChild(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	procs, err := List("/proc")
	if err != nil {
		t.Fatal(err)
	}
	tree := Tree(procs, os.Getpid())
	if !tree[os.Getpid()] || !tree[child.Process.Pid] {
		t.Fatalf("tree of %d lacks itself or its child %d: %v", os.Getpid(), child.Process.Pid, tree)
	}
	if tree[1] {
		t.Fatal("tree of the test process holds pid 1")
	}
	if rss, err := StatusBytes("/proc", os.Getpid(), "VmRSS"); err != nil || rss == 0 {
		t.Fatalf("VmRSS of the test process: %d, %v", rss, err)
	}
	if _, err := StatusBytes("/proc", os.Getpid(), "NoSuchField"); err == nil {
		t.Fatal("a missing field was read")
	}
	if len(WithCommPrefix(procs, "sleep")) == 0 {
		t.Fatal("no process named sleep found")
	}
}

func TestMeminfo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(path, []byte("MemTotal:       223636 kB\nMemFree:        189904 kB\nHugePages_Total:       0\nbad line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Meminfo(path)
	if err != nil || len(m) != 2 || m["MemTotal"] != 223636<<10 || m["MemFree"] != 189904<<10 {
		t.Fatalf("got %v, %v", m, err)
	}
	if err := os.WriteFile(path, []byte("MemFree: 1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Meminfo(path); err == nil || !strings.Contains(err.Error(), "no MemTotal") {
		t.Fatalf("meminfo without MemTotal: %v", err)
	}
}

func TestCgroupMemoryRoom(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup string
		files        map[string]string
		room         uint64
		limited      bool
	}{
		{"v2 limited", "0::/pods/stasisd\n", map[string]string{"pods/stasisd/memory.max": "1000\n", "pods/stasisd/memory.current": "400\n"}, 600, true},
		{"v2 over", "0::/a\n", map[string]string{"a/memory.max": "1000\n", "a/memory.current": "1200\n"}, 0, true},
		{"v2 unlimited", "0::/a\n", map[string]string{"a/memory.max": "max\n", "a/memory.current": "1\n"}, 0, false},
		{"v1", "9:pids:/\n4:memory:/b\n0::/\n", map[string]string{"memory/b/memory.limit_in_bytes": "2048\n", "memory/b/memory.usage_in_bytes": "48\n"}, 2000, true},
		{"v1 unlimited", "4:memory:/b\n", map[string]string{"memory/b/memory.limit_in_bytes": "9223372036854771712\n", "memory/b/memory.usage_in_bytes": "48\n"}, 0, false},
		{"no files", "0::/gone\n", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc, cg := t.TempDir(), t.TempDir()
			if err := os.MkdirAll(filepath.Join(proc, "7"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(proc, "7", "cgroup"), []byte(tc.cgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			for name, v := range tc.files {
				path := filepath.Join(cg, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			room, limited, err := CgroupMemoryRoom(proc, cg, 7)
			if err != nil || room != tc.room || limited != tc.limited {
				t.Fatalf("got room %d limited %v err %v; want %d %v", room, limited, err, tc.room, tc.limited)
			}
		})
	}
	if _, _, err := CgroupMemoryRoom("/proc", "/sys/fs/cgroup", os.Getpid()); err != nil {
		t.Fatalf("this process's cgroup: %v", err)
	}
}
