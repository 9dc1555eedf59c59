//go:build gpu

package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/stasis-run/stasis/engine"
)

// restoreStacker writes, with STASIS_ANYWHERE_STACKS=1, where a resume's
// restore step is waiting when it has not returned after 1 s and again
// after 2.5 s: the processes of the machine with the kernel function
// each sleeps in, the kernel stacks of every runsc process, and the
// sandbox's own goroutines (runsc debug --stacks). It is how one asks why
// runsc's restore sometimes returns only when the pull has brought the
// whole memory image, without runsc's debug logs, whose cost changes
// the timing looked at.
type restoreStacker struct {
	g    *gpuEnv
	id   string
	file string
	mu   sync.Mutex
	done chan struct{}
}

// restoreStacks is a stacker for sandbox id's restore writing to
// STASIS_GPU_OUT/NAME.stacks.txt; it does nothing unless asked for.
func (g *gpuEnv) restoreStacks(id, name string) *restoreStacker {
	if os.Getenv("STASIS_ANYWHERE_STACKS") == "" {
		return nil
	}
	return &restoreStacker{g: g, id: id, file: filepath.Join(getenv("STASIS_GPU_OUT", "."), name+".stacks.txt")}
}

func (s *restoreStacker) before(ev engine.Step) {
	if s == nil || ev.Name != engine.StepRestore {
		return
	}
	s.mu.Lock()
	s.done = make(chan struct{})
	done := s.done
	s.mu.Unlock()
	go func() {
		began := time.Now()
		for _, at := range []time.Duration{time.Second, 2500 * time.Millisecond} {
			select {
			case <-done:
				return
			case <-time.After(at - time.Since(began)):
			}
			s.write(fmt.Sprintf("== the restore step at %.1f s\n%s", time.Since(began).Seconds(), s.look()))
		}
	}()
}

func (s *restoreStacker) after(ev engine.Step) {
	if s == nil || ev.Name != engine.StepRestore {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		close(s.done)
		s.done = nil
	}
	s.write(fmt.Sprintf("== the restore step returned after %.2f s\n", ev.Duration.Seconds()))
}

func (s *restoreStacker) write(text string) {
	f, err := os.OpenFile(s.file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	f.WriteString(text)
}

// look is what the machine's processes are doing now.
func (s *restoreStacker) look() string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, _ := exec.CommandContext(ctx, "ps", "-eLo", "pid,tid,ppid,stat,wchan:32,etimes,comm,args", "--sort", "pid").CombinedOutput()
	for _, line := range strings.Split(string(ps), "\n") {
		// runsc's processes (the sandbox's is called exe).
		if strings.Contains(line, "runsc") || strings.Contains(line, " exe ") || strings.HasPrefix(strings.TrimSpace(line), "PID") {
			b.WriteString(line + "\n")
		}
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), "runsc") {
			continue
		}
		dir := filepath.Dir(p)
		tasks, _ := filepath.Glob(filepath.Join(dir, "task", "*", "stack"))
		fmt.Fprintf(&b, "-- %s: %s\n", dir, strings.ReplaceAll(string(cmd), "\x00", " "))
		seen := map[string]int{}
		for _, t := range tasks {
			st, _ := os.ReadFile(t)
			seen[string(st)]++
		}
		for st, n := range seen {
			fmt.Fprintf(&b, "%d thread(s):\n%s", n, st)
		}
	}
	args := append(s.g.rt.GlobalFlags(), "debug", "--stacks", s.id)
	out, err := exec.CommandContext(ctx, s.g.rt.Path(), args...).CombinedOutput()
	fmt.Fprintf(&b, "-- runsc debug --stacks %s (%v):\n%s\n", s.id, err, out)
	return b.String()
}
