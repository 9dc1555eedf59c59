package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// BenchmarkHugePages measures what sandbox memory in huge pages changes
// (docs/benchmarks.md, "Huge pages and the memory load"): a CPU actor
// holding STASIS_BENCH_OWN_MIB (default 2048) MiB of its own bytes is
// booted, suspended and resumed (to its readiness probe, image in the page
// cache) once per iteration, under the host's transparent huge page
// settings of a stock kernel (shmem_enabled never, defrag madvise: 4 KiB
// pages) and as `stasis node tune` sets them (advise, defer), each with
// the memory loaded eagerly and in the background; the suspend's
// checkpoint and commit steps are reported too. It changes the host's
// settings while it runs and puts them back. Run it with
//
//	go test -run '^$' -bench HugePages -benchtime 3x ./engine
func BenchmarkHugePages(b *testing.B) {
	saved, err := node.ReadHugePages(node.HugePagesDir)
	if err != nil {
		b.Fatal(err)
	}
	set := func(shmem, defrag string) {
		for name, value := range map[string]string{"shmem_enabled": shmem, "defrag": defrag} {
			if err := os.WriteFile(filepath.Join(node.HugePagesDir, name), []byte(value), 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	defer set(saved.ShmemEnabled, saved.Defrag)
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: testactor.RunscRoot(b), Network: "none"})
	if err != nil {
		b.Fatal(err)
	}
	own := getenvInt(b, "STASIS_BENCH_OWN_MIB", 2048)
	bundleDir := testactor.Bundle(b, b.TempDir(), testactor.Options{Ballast: []string{"0", fmt.Sprint(own), "0", "7"}})
	probe := engine.Probe{Command: []string{"/counter", "await", "get"}, Timeout: 5 * time.Minute}
	for _, pages := range []struct{ name, shmem, defrag string }{{"4k", "never", "madvise"}, {"huge", "advise", "defer"}} {
		for _, load := range []engine.MemoryLoad{engine.MemoryLoadEager, engine.MemoryLoadBackground} {
			b.Run(pages.name+"/"+string(load), func(b *testing.B) {
				set(pages.shmem, pages.defrag)
				benchCycles(b, &engine.Engine{Runtime: rt, MemoryLoad: load}, bundleDir, fmt.Sprintf("huge-%s-%s", pages.name, load), probe)
			})
		}
	}
}
