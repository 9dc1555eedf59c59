//go:build loadbench

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/internal/procfs"
)

// TestServiceLoad is the service's load benchmark (scripts/bench-service.sh
// runs it): LOAD_ACTORS counter actors (20) are suspended and resumed in a
// loop by LOAD_PARALLEL workers (4) for LOAD_DURATION (10m). It prints
// operations per minute, p50/p99 latency per kind and stasisd's memory, and
// fails if any actor ends in a transitional state or lost its count.
func TestServiceLoad(t *testing.T) {
	actors := envInt(t, "LOAD_ACTORS", 20)
	parallel := envInt(t, "LOAD_PARALLEL", 4)
	duration, err := time.ParseDuration(getenvOr("LOAD_DURATION", "10m"))
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	ctx := context.Background()
	ids := make([]string, actors)
	counts := make([]int, actors)
	for i := range ids {
		ids[i] = fmt.Sprintf("load-%02d", i)
		d.run("counter", ids[i])
		d.counter(ids[i], "incr")
		counts[i] = 1
	}
	pid := d.cmd.Process.Pid
	var mu sync.Mutex
	latencies := map[string][]time.Duration{}
	failures := map[string]int{}
	var peakRSS uint64
	next := make(chan int)
	deadline := time.Now().Add(duration)
	go func() {
		for i := 0; time.Now().Before(deadline); i = (i + 1) % actors {
			next <- i
		}
		close(next)
	}()
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for _, verb := range []string{"Suspend", "Resume"} {
					start := time.Now()
					_, err := call(ctx, d.api, verb, ids[i])
					took := time.Since(start)
					mu.Lock()
					if err != nil {
						failures[verb]++
						t.Logf("%s %s: %v", verb, ids[i], err)
					} else {
						latencies[verb] = append(latencies[verb], took)
					}
					if rss, _ := procfs.StatusBytes("/proc", pid, "VmRSS"); rss > peakRSS {
						peakRSS = rss
					}
					mu.Unlock()
				}
				// Each cycle must keep the actor's memory.
				got := d.counter(ids[i], "incr")
				mu.Lock()
				counts[i]++
				want := " " + strconv.Itoa(counts[i])
				mu.Unlock()
				if !strings.HasSuffix(got, want) {
					t.Errorf("%s counts %q after a cycle, want ...%s", ids[i], got, want)
				}
			}
		}()
	}
	wg.Wait()
	stuck := 0
	list, err := d.api.ListActors(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		if a.State.Transitional() || a.State != api.Running {
			stuck++
			t.Errorf("%s ended %s: %s", a.ID, a.State, a.Reason)
		}
	}
	hwm, _ := procfs.StatusBytes("/proc", pid, "VmHWM")
	report := map[string]any{"actors": actors, "parallel": parallel, "durationS": duration.Seconds(), "peakRSSBytes": peakRSS, "hwmBytes": hwm,
		"stuckActors": stuck, "failures": failures}
	fmt.Printf("\n| operation | count | per minute | p50 (s) | p99 (s) | max (s) |\n|---|---|---|---|---|---|\n")
	total := 0
	for _, verb := range []string{"Suspend", "Resume"} {
		l := latencies[verb]
		slices.Sort(l)
		total += len(l)
		if len(l) == 0 {
			continue
		}
		p := func(q float64) float64 { return l[min(len(l)-1, int(q*float64(len(l))))].Seconds() }
		fmt.Printf("| %s | %d | %.1f | %.2f | %.2f | %.2f |\n", strings.ToLower(verb), len(l), float64(len(l))/duration.Minutes(), p(0.5), p(0.99), l[len(l)-1].Seconds())
		report[verb] = map[string]any{"count": len(l), "perMinute": float64(len(l)) / duration.Minutes(), "p50S": p(0.5), "p99S": p(0.99), "maxS": l[len(l)-1].Seconds()}
	}
	fmt.Printf("\n%d operations in %s (%.1f per minute), %d actors, %d workers; stasisd peak RSS %.1f MiB; %d stuck actors; failures %v\n",
		total, duration, float64(total)/duration.Minutes(), actors, parallel, float64(peakRSS)/(1<<20), stuck, failures)
	if out := os.Getenv("LOAD_OUT"); out != "" {
		data, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(filepath.Clean(out), append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func getenvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
