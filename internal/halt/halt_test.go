package halt_test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/internal/halt"
)

// stoppedChild starts a process that waits, stopped by SIGSTOP, and seen
// stopped; it is killed when the test ends.
func stoppedChild(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	if halt.Of(pid) != nil {
		t.Fatalf("a running process (%d) is said halted: %+v", pid, halt.Of(pid))
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The stop takes hold a moment after the signal is sent.
	for deadline := time.Now().Add(10 * time.Second); halt.ProcState(pid) != 'T'; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 10 s after SIGSTOP (state %q)", pid, halt.ProcState(pid))
		}
	}
	return pid
}

func TestOfAStoppedProcess(t *testing.T) {
	pid := stoppedChild(t)
	h := halt.Of(pid)
	if h == nil || !strings.Contains(h.How, "SIGSTOP") || !strings.Contains(h.Mend, "kill -CONT "+strconv.Itoa(pid)) || h.Unkillable {
		t.Fatalf("halt of a process stopped by SIGSTOP: %+v", h)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); halt.Of(pid) != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still said halted 10 s after SIGCONT: %+v", pid, halt.Of(pid))
		}
	}
	if h := halt.Of(0); h != nil {
		t.Fatalf("no process (pid 0) said halted: %+v", h)
	}
}

// TestWatchEndsWorkOnAStoppedProcess: work waiting on a stopped process
// is ended and told why; work beside a running one is not.
func TestWatchEndsWorkOnAStoppedProcess(t *testing.T) {
	pid := stoppedChild(t)
	ctx, ended := halt.Watch(context.Background(), func() int { return pid })
	<-ctx.Done() // the work: waits for as long as the process is stopped
	h, got := ended()
	if h == nil || got != pid || !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("watch of stopped process %d: %+v (pid %d), ctx %v", pid, h, got, ctx.Err())
	}

	// Work that ends on its own, beside no process: no halt; its ctx
	// ends with the watch.
	ctx, ended = halt.Watch(context.Background(), func() int { return 0 })
	if h, _ := ended(); h != nil || ctx.Err() == nil {
		t.Fatalf("watch of no process: %+v, ctx %v", h, ctx.Err())
	}
}
