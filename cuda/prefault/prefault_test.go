package prefault

import (
	"context"
	"os"
	"testing"
)

func TestParseMapsLine(t *testing.T) {
	for line, want := range map[string]Mapping{
		"7f0000000000-7f0000200000 rw-p 00000000 00:00 0 ":       {Start: 0x7f0000000000, End: 0x7f0000200000, Perms: "rw-p"},
		"55d4-55d8 r-xp 00000000 08:01 123 /usr/bin/python3.11":  {Start: 0x55d4, End: 0x55d8, Perms: "r-xp", Path: "/usr/bin/python3.11"},
		"200000000-300000000 rw-s 00000000 00:05 7 /dev/nvidia0": {Start: 0x200000000, End: 0x300000000, Perms: "rw-s", Path: "/dev/nvidia0"},
		"1000-2000 rw-s 00000000 00:05 7 /memfd:cuda (deleted)":  {Start: 0x1000, End: 0x2000, Perms: "rw-s", Path: "/memfd:cuda (deleted)"},
	} {
		got, err := parseMapsLine(line)
		if err != nil || got != want {
			t.Errorf("%q: got %+v %v, want %+v", line, got, err, want)
		}
	}
	for _, bad := range []string{"", "zz-10 rw-p 0 0 0", "10-5 rw-p 0 0 0", "10 rw-p 0 0 0"} {
		if _, err := parseMapsLine(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestWanted(t *testing.T) {
	for m, want := range map[Mapping]bool{
		{Perms: "rw-p"}:                              true,
		{Perms: "rw-s", Path: "/memfd:x"}:            true,
		{Perms: "rw-p", Path: "[heap]"}:              true,
		{Perms: "rw-s", Path: "/dev/zero (deleted)"}: true,
		{Perms: "r--p", Path: "/usr/lib/libc.so"}:    false,
		{Perms: "---p"}:                              false,
		{Perms: "rw-s", Path: "/dev/nvidia0"}:        false,
		{Perms: "rw-s", Path: "/dev/nvidia-uvm"}:     false,
		{Perms: "rw-p", Path: "[vvar]"}:              false,
	} {
		if got := m.Wanted(); got != want {
			t.Errorf("%+v: wanted %v, want %v", m, got, want)
		}
	}
}

// Reading this test process's own memory exercises the real /proc path:
// every wanted mapping is read, and the bytes add up to their sizes.
func TestProcessesReadsOwnMemory(t *testing.T) {
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	defer func() { _ = buf[len(buf)-1] }() // kept mapped until the end
	maps, err := ReadMaps("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	res := Processes(context.Background(), "/proc", []int{os.Getpid()}, 4)
	var want int64
	for _, m := range maps {
		if m.Wanted() {
			want += int64(m.End - m.Start)
		}
	}
	// Mappings come and go while the test runs (the runtime grows its
	// heap), so the bytes read are compared with what was listed before,
	// with slack for that churn, and must cover the 64 MiB buffer.
	if res.Bytes < 64<<20 || res.Mappings == 0 || res.Workers != 4 {
		t.Fatalf("prefault of this process: %+v (its wanted mappings hold %d bytes)", res, want)
	}
	if res.Failed > 0 && res.Bytes < want/2 {
		t.Fatalf("prefault failed on most of this process: %+v", res)
	}
}

func TestProcessesReportsWhatItCannotRead(t *testing.T) {
	res := Processes(context.Background(), t.TempDir(), []int{4242}, 2)
	if res.Failed != 1 || res.Error == "" || res.Bytes != 0 {
		t.Fatalf("prefault of a missing process: %+v", res)
	}
}
