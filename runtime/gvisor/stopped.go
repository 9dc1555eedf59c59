package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
)

// stoppedPoll is how often a runsc command that needs the sandbox to answer
// looks at whether the sandbox process can run at all. A stop seen at two
// looks in a row ends the command: runsc would wait on the sandbox's
// control socket for as long as the stop lasts (hours, where a user or a
// cgroup freezer left it), and the actor's operation with it.
const stoppedPoll = 500 * time.Millisecond

// watchStopped returns ctx for a runsc command on container id, which it
// cancels where the sandbox process is found stopped at two looks in a
// row, and ended, to call once the command has returned: it stops the
// watch and says why the command was ended, nil where it was not.
func (r *Runsc) watchStopped(ctx context.Context, id string) (context.Context, func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	found := make(chan error, 1)
	go func() {
		tick := time.NewTicker(stoppedPoll)
		defer tick.Stop()
		for seen := 0; ; {
			select {
			case <-done:
				found <- nil
				return
			case <-tick.C:
			}
			stopped := r.stopped(id)
			if stopped == nil {
				seen = 0
				continue
			}
			if seen++; seen == 2 {
				found <- stopped
				cancel()
				return
			}
		}
	}()
	return ctx, func() error {
		close(done)
		stopped := <-found
		cancel()
		return stopped
	}
}

// stopped is why container id's sandbox process cannot run now, with
// what lets it run again; nil where it can, or where that cannot be told.
func (r *Runsc) stopped(id string) error {
	pid := r.sandboxPID(id)
	h := haltOf(pid)
	if h == nil {
		return nil
	}
	return errdefs.Mark(fmt.Errorf("the sandbox process of container %s (pid %d) is %s, so runsc cannot reach it: %s, then try again", id, pid, h.how, h.mend), errdefs.ErrFailedPrecondition)
}

// sandboxPID reads the pid of container id's sandbox process from runsc's
// own record of the container in its state folder (runsc state would ask
// the sandbox, which is what cannot answer); 0 where there is none or it
// cannot be read.
func (r *Runsc) sandboxPID(id string) int {
	path, ok := r.containers()[id]
	if !ok {
		return 0
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var state struct {
		Sandbox struct {
			PID int `json:"pid"`
		} `json:"sandbox"`
	}
	if json.Unmarshal(data, &state) != nil {
		return 0
	}
	return state.Sandbox.PID
}

// halt is why a process cannot run.
type halt struct {
	how, mend string
	// unkillable: a kill takes effect only once it runs again (cgroup
	// v1's freezer holds even SIGKILL back; a stop by a signal, a tracer
	// or cgroup v2's freezer does not).
	unkillable bool
}

// haltOf says why process pid cannot run (stopped by a signal or a
// tracer, or in a frozen cgroup) and what lets it run again; nil where it
// can, is gone, or cannot be read.
func haltOf(pid int) *halt {
	if pid <= 0 {
		return nil
	}
	switch procState(pid) {
	case 0:
		return nil
	case 'T':
		return &halt{how: "stopped by a signal (SIGSTOP or SIGTSTP)", mend: fmt.Sprintf("let it continue (kill -CONT %d)", pid)}
	case 't':
		return &halt{how: "stopped by a tracer", mend: "detach the debugger or tracer"}
	}
	dir, v2 := freezerOf(pid)
	switch {
	case dir == "":
		return nil
	case v2:
		if events, err := os.ReadFile(filepath.Join(dir, "cgroup.events")); err == nil && slices.Contains(strings.Split(string(events), "\n"), "frozen 1") {
			return &halt{how: "in a frozen cgroup (" + dir + ")", mend: "thaw it (echo 0 > " + filepath.Join(dir, "cgroup.freeze") + ")"}
		}
	default:
		p := filepath.Join(dir, "freezer.state")
		if state, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(state)) != "THAWED" {
			return &halt{how: "in a frozen cgroup (" + dir + ")", mend: "thaw it (echo THAWED > " + p + ")", unkillable: true}
		}
	}
	return nil
}

// procState is process pid's state letter in /proc/PID/stat (R, S, T, Z
// ...): 0 where the process is gone or the file cannot be read, '?' where
// the line cannot be parsed.
func procState(pid int) byte {
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

// freezerOf is the folder of the freezer that holds process pid: its
// cgroup v2 cgroup (v2 true) where that has one (cgroup.freeze), else its
// cgroup in v1's freezer hierarchy; "" where it has neither.
func freezerOf(pid int) (dir string, v2 bool) {
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
