//go:build gpu

package engine_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stasis-run/stasis/internal/procfs"
)

// machineSample is what the machine did in one interval of a benchmark:
// the page cache's dirty and written-back pages at its end, the disks'
// reads and writes, and the cores busy and waiting on I/O, over it.
type machineSample struct {
	T            float64 `json:"t"`
	DirtyMiB     float64 `json:"dirtyMiB"`
	WritebackMiB float64 `json:"writebackMiB"`
	ReadMBs      float64 `json:"readMBs"`
	WriteMBs     float64 `json:"writeMBs"`
	BusyCores    float64 `json:"busyCores"`
	IOWaitCores  float64 `json:"iowaitCores"`
	// Commands is the cores each command (its processes' names, all
	// their threads) kept busy, those above a tenth of a core: who the
	// busy cores were. A process that ended within the interval is not
	// counted.
	Commands map[string]float64 `json:"commands,omitempty"`
}

// machineCounters is one reading of the counters behind a sample.
type machineCounters struct {
	at                  time.Time
	dirty, writeback    float64 // pages
	readSect, writeSect float64 // 512-byte sectors, every disk
	busy, iowait        float64 // clock ticks, every core
	procs               map[int]procTicks
}

// procTicks is a process's name and the clock ticks its threads ran.
type procTicks struct {
	comm  string
	ticks float64
}

// sampleMachine reads the machine's counters every interval until the
// returned stop is called, which returns the samples: where a benchmark's
// time went (the disk, write-back, the cores) without a profiler.
func sampleMachine(interval time.Duration) (stop func() []machineSample) {
	disks := wholeDisks()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var samples []machineSample
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		first := readCounters(disks)
		prev := first
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			cur := readCounters(disks)
			dt := cur.at.Sub(prev.at).Seconds()
			samples = append(samples, machineSample{
				T:            cur.at.Sub(first.at).Seconds(),
				DirtyMiB:     cur.dirty * 4096 / (1 << 20),
				WritebackMiB: cur.writeback * 4096 / (1 << 20),
				ReadMBs:      (cur.readSect - prev.readSect) * 512 / 1e6 / dt,
				WriteMBs:     (cur.writeSect - prev.writeSect) * 512 / 1e6 / dt,
				BusyCores:    (cur.busy - prev.busy) / 100 / dt,
				IOWaitCores:  (cur.iowait - prev.iowait) / 100 / dt,
				Commands:     commandCores(prev.procs, cur.procs, dt),
			})
			prev = cur
		}
	}()
	return func() []machineSample {
		close(done)
		wg.Wait()
		return samples
	}
}

// wholeDisks names the block devices whose counts add up to the
// machine's disk traffic once: those no other device is stacked on (a
// disk under a device-mapper volume is counted through the volume).
func wholeDisks() map[string]bool {
	disks := map[string]bool{}
	entries, _ := os.ReadDir("/sys/block")
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "loop") || strings.HasPrefix(name, "ram") || strings.HasPrefix(name, "zram") {
			continue
		}
		if holders, _ := os.ReadDir(filepath.Join("/sys/block", name, "holders")); len(holders) > 0 {
			continue
		}
		disks[name] = true
	}
	return disks
}

// readCounters reads /proc/vmstat, /proc/diskstats and /proc/stat; a
// counter it cannot read stays zero (the benchmark is not about them).
func readCounters(disks map[string]bool) machineCounters {
	c := machineCounters{at: time.Now(), procs: readProcs()}
	eachLine("/proc/vmstat", func(f []string) {
		if len(f) == 2 {
			switch f[0] {
			case "nr_dirty":
				c.dirty, _ = strconv.ParseFloat(f[1], 64)
			case "nr_writeback":
				c.writeback, _ = strconv.ParseFloat(f[1], 64)
			}
		}
	})
	eachLine("/proc/diskstats", func(f []string) {
		if len(f) >= 10 && disks[f[2]] {
			r, _ := strconv.ParseFloat(f[5], 64)
			w, _ := strconv.ParseFloat(f[9], 64)
			c.readSect += r
			c.writeSect += w
		}
	})
	eachLine("/proc/stat", func(f []string) {
		if len(f) >= 9 && f[0] == "cpu" {
			var v [8]float64
			for i := range v {
				v[i], _ = strconv.ParseFloat(f[i+1], 64)
			}
			// user nice system idle iowait irq softirq steal
			c.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
			c.iowait = v[4]
		}
	})
	return c
}

// commandCores is the cores each command ran between two readings of
// the processes, above a tenth of a core.
func commandCores(prev, cur map[int]procTicks, dt float64) map[string]float64 {
	by := map[string]float64{}
	for pid, c := range cur {
		if p, ok := prev[pid]; ok && p.comm == c.comm {
			by[c.comm] += (c.ticks - p.ticks) / 100 / dt
		}
	}
	for comm, cores := range by {
		if cores < 0.1 {
			delete(by, comm)
		}
	}
	return by
}

// readProcs reads every process's name and clock ticks (user and
// system, all its threads); none when /proc cannot be read.
func readProcs() map[int]procTicks {
	procs := map[int]procTicks{}
	list, _ := procfs.List("/proc")
	for _, p := range list {
		procs[p.PID] = procTicks{comm: p.Comm, ticks: float64(p.CPUTicks)}
	}
	return procs
}

func eachLine(path string, use func([]string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		use(strings.Fields(s.Text()))
	}
}
