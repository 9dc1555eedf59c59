//go:build loadbench

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/procfs"
)

// TestServeScale is the published ports' scale benchmark
// (scripts/bench-serve.sh runs it): SCALE_ACTORS counter actors (100), each
// with a port of its own published on 127.0.0.1, all suspended, then one
// request to each sent at once: every actor is woken by its own request
// and answers with its own process. It prints the time to the first and
// the last answer, the answers' p50 and p99, stasisd's memory and its open
// files, and fails if a request is lost or answered by another process.
func TestServeScale(t *testing.T) {
	actors := envInt(t, "SCALE_ACTORS", 100)
	d := servingDaemon(t)
	ids := make([]string, actors)
	published := make([]string, actors)
	process := make([]string, actors)
	start := time.Now()
	for i := range ids {
		ids[i] = fmt.Sprintf("scale-%03d", i)
		published[i], process[i] = d.served(ids[i], nil)
	}
	runFor := time.Since(start)
	start = time.Now()
	for _, id := range ids {
		d.op("Suspend", id)
	}
	suspendFor := time.Since(start)
	var mu sync.Mutex
	var answers []time.Duration
	lost := 0
	var wg sync.WaitGroup
	start = time.Now()
	for i := range ids {
		wg.Go(func() {
			reply, err := ask(published[i], "incr")
			took := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if err != nil || reply != process[i]+" 2" {
				lost++
				t.Errorf("%s: %q, %v; want %s 2", ids[i], reply, err, process[i])
				return
			}
			answers = append(answers, took)
		})
	}
	wg.Wait()
	slices.Sort(answers)
	pid := d.cmd.Process.Pid
	hwm, _ := procfs.StatusBytes("/proc", pid, "VmHWM")
	fds, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	for _, id := range ids {
		if a := d.inspect(id); a.State != api.Running {
			t.Errorf("%s after its wake: %s (%s)", id, a.State, a.Reason)
		}
	}
	p := func(q float64) float64 {
		if len(answers) == 0 {
			return 0
		}
		return answers[min(len(answers)-1, int(q*float64(len(answers))))].Seconds()
	}
	report := map[string]any{"actors": actors, "runS": runFor.Seconds(), "suspendS": suspendFor.Seconds(), "lost": lost,
		"firstS": p(0), "p50S": p(0.5), "p99S": p(0.99), "lastS": p(1), "hwmBytes": hwm, "openFiles": len(fds)}
	fmt.Printf("\n| actors | run all (s) | suspend all (s) | first answer (s) | p50 (s) | p99 (s) | last (s) | lost | stasisd peak RSS | open files |\n|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| %d | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | %d | %.1f MiB | %d |\n", actors, runFor.Seconds(), suspendFor.Seconds(), p(0), p(0.5), p(0.99), p(1), lost, float64(hwm)/(1<<20), len(fds))
	if out := os.Getenv("SCALE_OUT"); out != "" {
		data, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(filepath.Clean(out), append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
