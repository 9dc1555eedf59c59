package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/api"
)

// TestRunscKilledMidCheckpoint kills the runsc checkpoint process that
// stasisd started as soon as it runs (its image folder appears, by inotify,
// then the process is looked for): the suspend fails, the actor keeps
// running with its counter, and a second suspend works.
func TestRunscKilledMidCheckpoint(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")

	snapshots := filepath.Join(d.data, "snapshots")
	killed := make(chan error, 1)
	go func() { killed <- killCheckpointWhenWriting(snapshots) }()
	_, err := call(context.Background(), d.api, "Suspend", "a1")
	if kerr := <-killed; kerr != nil {
		t.Fatalf("kill the checkpoint: %v", kerr)
	}
	if err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("the suspend whose checkpoint was killed: %v", err)
	}
	a := d.inspect("a1")
	if a.State != api.Running || !strings.Contains(a.Reason, "keeps running") {
		t.Fatalf("after the killed checkpoint: %+v", a)
	}
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter after the killed checkpoint: %q", got)
	}
	if a := d.op("Suspend", "a1"); a.State != api.Suspended {
		t.Fatalf("the next suspend: %+v", a)
	}
}

// killCheckpointWhenWriting waits, by inotify, for a snapshot folder under
// root to get its image folder, then kills the runsc checkpoint process
// writing there as soon as it exists.
func killCheckpointWhenWriting(root string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	snap, err := firstEntry(fd, root)
	if err != nil {
		return err
	}
	image, err := firstEntry(fd, filepath.Join(root, snap))
	if err != nil {
		return err
	}
	dir := filepath.Join(root, snap, image)
	deadline := time.Now().Add(time.Minute)
	for {
		err := killProcesses(func(cmdline string) bool {
			return strings.Contains(cmdline, "checkpoint") && strings.Contains(cmdline, dir)
		})
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// firstEntry returns the first entry of dir, waiting for one to be created.
// The watch is set before dir is listed, so an entry made in between is
// seen either way.
func firstEntry(fd int, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE)
	if err != nil {
		return "", err
	}
	defer func() { _, _ = unix.InotifyRmWatch(fd, uint32(wd)) }()
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return entries[0].Name(), nil
	}
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil {
			return "", err
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if int(ev.Wd) == wd && name != "" {
				return name, nil
			}
		}
	}
}

func killProcesses(match func(cmdline string) bool) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	killed := 0
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !match(strings.ReplaceAll(string(data), "\x00", " ")) {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	if killed == 0 {
		return fmt.Errorf("no runsc checkpoint process found")
	}
	return nil
}
