// Package halt tells why a process cannot run (stopped by a signal or a
// tracer, or in a frozen cgroup) and what lets it run again, and ends the
// work that waits on such a process. A sandbox's or a VM's process that a
// user, a debugger or a cgroup freezer stopped answers nothing: runsc's
// commands, QEMU's monitor and a guest agent wait on it for as long as the
// stop lasts (hours), and the actor's operation with them.
package halt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Poll is how often Watch looks at whether the process can run.
const Poll = 500 * time.Millisecond

// Halt is why a process cannot run, and what lets it run again.
type Halt struct {
	How, Mend string
	// Unkillable: a kill takes effect only once it runs again (cgroup
	// v1's freezer holds even SIGKILL back; a stop by a signal, a tracer
	// or cgroup v2's freezer does not).
	Unkillable bool
}

// Of says why process pid cannot run and what lets it run again; nil
// where it can, is gone, or cannot be read.
func Of(pid int) *Halt {
	if pid <= 0 {
		return nil
	}
	switch ProcState(pid) {
	case 0:
		return nil
	case 'T':
		return &Halt{How: "stopped by a signal (SIGSTOP or SIGTSTP)", Mend: fmt.Sprintf("let it continue (kill -CONT %d)", pid)}
	case 't':
		return &Halt{How: "stopped by a tracer", Mend: "detach the debugger or tracer"}
	}
	dir, v2 := Freezer(pid)
	switch {
	case dir == "":
		return nil
	case v2:
		if events, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil && slices.Contains(strings.Split(string(events), "\n"), "frozen 1") {
			return &Halt{How: "in a frozen cgroup (" + dir + ")", Mend: "thaw it (echo 0 > " + filepath.Join(dir, "cgroup.freeze") + ")"}
		}
	default:
		p := filepath.Join(dir, "freezer.state")
		if state, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(state)) != "THAWED" {
			return &Halt{How: "in a frozen cgroup (" + dir + ")", Mend: "thaw it (echo THAWED > " + p + ")", Unkillable: true}
		}
	}
	return nil
}

// Watch returns ctx for work that waits on the process pid names (asked at
// each look: 0 where there is none), which it cancels where the process is
// found halted at two looks in a row, and ended, to call once the work has
// returned: it stops the watch and gives the halt that ended the work, with
// the process's pid; nil where none did.
func Watch(ctx context.Context, pid func() int) (context.Context, func() (*Halt, int)) {
	ctx, cancel := context.WithCancel(ctx)
	type found struct {
		halt *Halt
		pid  int
	}
	done := make(chan struct{})
	result := make(chan found, 1)
	go func() {
		tick := time.NewTicker(Poll)
		defer tick.Stop()
		for seen := 0; ; {
			select {
			case <-done:
				result <- found{}
				return
			case <-tick.C:
			}
			p := pid()
			h := Of(p)
			if h == nil {
				seen = 0
				continue
			}
			if seen++; seen == 2 {
				result <- found{h, p}
				cancel()
				return
			}
		}
	}()
	return ctx, func() (*Halt, int) {
		close(done)
		f := <-result
		cancel()
		return f.halt, f.pid
	}
}

// ProcState is process pid's state letter in /proc/PID/stat (R, S, T, Z
// ...): 0 where the process is gone or the file cannot be read, '?' where
// the line cannot be parsed.
func ProcState(pid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 || end+2 >= len(stat) {
		return '?'
	}
	return stat[end+2]
}

// Freezer is the folder of the freezer that holds process pid: its cgroup
// v2 cgroup (v2 true) where that has one (cgroup.freeze), else its cgroup
// in v1's freezer hierarchy; "" where it has neither.
func Freezer(pid int) (dir string, v2 bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false
	}
	for line := range strings.Lines(string(data)) {
		// hierarchy-ID:controllers:path; cgroup v2's has ID 0 and no
		// controllers, v1's freezer names its own.
		_, rest, _ := strings.Cut(strings.TrimSpace(line), ":")
		controllers, cgroup, _ := strings.Cut(rest, ":")
		switch {
		case controllers == "":
			dir := filepath.Join("/sys/fs/cgroup", cgroup)
			if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err == nil {
				return dir, true
			}
		case slices.Contains(strings.Split(controllers, ","), "freezer"):
			return filepath.Join("/sys/fs/cgroup/freezer", cgroup), false
		}
	}
	return "", false
}
