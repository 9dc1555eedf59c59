package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stasis-run/stasis/internal/units"
)

// WritebackDir is where Linux keeps its write-back thresholds.
const WritebackDir = "/proc/sys/vm"

// Writeback is when the kernel writes dirty page-cache pages to disk on
// its own: from the background threshold on, in the background; at the
// limit, writers wait. Each is a share of memory (vm.dirty_background_ratio,
// vm.dirty_ratio) or bytes (the _bytes files); the kernel reads 0 for the
// form not set. It matters to a pull from a store on this node's own disk:
// the pulled copy is written through the page cache, and once its dirty
// pages pass the background threshold (10% of memory by default, about
// 12 GB on a 125 GiB node) the kernel's writes share the disk with the
// pull's reads: a pull of 16 GiB on the H200 ran at 0.70-0.76x the disk's
// speed, 0.95x with the threshold above its copy (docs/benchmarks.md).
type Writeback struct {
	BackgroundRatio int64 `json:"backgroundRatio"`
	BackgroundBytes int64 `json:"backgroundBytes"`
	Ratio           int64 `json:"ratio"`
	Bytes           int64 `json:"bytes"`
}

// ReadWriteback reads the thresholds under dir (WritebackDir on a host).
func ReadWriteback(dir string) (Writeback, error) {
	var w Writeback
	for name, v := range map[string]*int64{
		"dirty_background_ratio": &w.BackgroundRatio, "dirty_background_bytes": &w.BackgroundBytes,
		"dirty_ratio": &w.Ratio, "dirty_bytes": &w.Bytes,
	} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return Writeback{}, fmt.Errorf("write-back settings: %w", err)
		}
		if *v, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || *v < 0 {
			return Writeback{}, fmt.Errorf("write-back settings: %s holds %q, not a count", filepath.Join(dir, name), strings.TrimSpace(string(b)))
		}
	}
	return w, nil
}

// Background is the dirty bytes from which the kernel writes back, on a
// node with available bytes of memory that could hold page cache (the
// kernel's own figure differs a little: free and reclaimable pages).
func (w Writeback) Background(available int64) int64 {
	if w.BackgroundBytes > 0 {
		return w.BackgroundBytes
	}
	return available / 100 * w.BackgroundRatio
}

// Describe says where write-back starts on a node with available bytes.
func (w Writeback) Describe(available int64) string {
	setting := fmt.Sprintf("vm.dirty_background_ratio %d%% of %s available", w.BackgroundRatio, units.Bytes(available))
	if w.BackgroundBytes > 0 {
		setting = "vm.dirty_background_bytes"
	}
	return fmt.Sprintf("from %s dirty (%s): a pull from a store on this node's disk reads more slowly once its copy passes that", units.Bytes(w.Background(available)), setting)
}
