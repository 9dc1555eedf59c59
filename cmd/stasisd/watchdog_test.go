package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/internal/fencefile"
)

// TestWatchdogFencesOncePerLapse: the watchdog runs the handed-over
// commands when the lease's lapse passes, once per lapse, not before; again
// for a later lapse; and ends when the lease is given up.
func TestWatchdogFencesOncePerLapse(t *testing.T) {
	dir := t.TempDir()
	path, out := fencefile.Path(dir), filepath.Join(dir, "fenced")
	hand := func(until int64) {
		t.Helper()
		data, err := fencefile.File{Holder: "test", Until: until, Commands: [][]string{{"/bin/sh", "-c", "echo fenced >> " + out}}}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := fencefile.Write(path, data); err != nil {
			t.Fatal(err)
		}
	}
	lines := func() int {
		data, _ := os.ReadFile(out)
		return strings.Count(string(data), "fenced")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	hand(fencefile.Now() + int64(time.Hour))
	ended := make(chan error, 1)
	go func() { ended <- watch(context.Background(), path, slog.New(slog.DiscardHandler)) }()
	time.Sleep(5 * watchdogInterval) // it must not fence a lease that holds
	if n := lines(); n != 0 {
		t.Fatalf("fenced %d times while the lease held", n)
	}
	lapse := fencefile.Now() + int64(200*time.Millisecond)
	hand(lapse)
	waitFor("the fence at the lapse", func() bool { return lines() == 1 })
	if now := fencefile.Now(); now < lapse {
		t.Fatalf("fenced %s before the lapse", time.Duration(lapse-now))
	}
	time.Sleep(5 * watchdogInterval)
	if n := lines(); n != 1 {
		t.Fatalf("fenced %d times for one lapse", n)
	}
	hand(fencefile.Now())
	waitFor("the fence at a later lapse", func() bool { return lines() == 2 })
	if err := fencefile.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog did not end when the lease was given up")
	}
}
