package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// HugePagesDir is where Linux keeps its transparent huge page settings.
const HugePagesDir = "/sys/kernel/mm/transparent_hugepage"

// HugePages is the host's transparent huge page settings that decide
// whether runsc backs sandbox memory (its memfd) with huge pages. With them
// the restore of an 8 GiB GPU actor on the H200 loaded its memory 3.4x
// faster and its suspend took 1.5x less time (docs/benchmarks.md, "Huge
// pages"); runsc's default settings use them only when the host lets it.
type HugePages struct {
	// ShmemEnabled and Defrag are the selected values of shmem_enabled and
	// defrag; empty where unreadable.
	ShmemEnabled string `json:"shmemEnabled"`
	Defrag       string `json:"defrag"`
	// Sandbox says whether runsc uses huge pages under these settings.
	Sandbox bool `json:"sandbox"`
}

// ReadHugePages reads the settings under dir (HugePagesDir on a host).
func ReadHugePages(dir string) (HugePages, error) {
	shmem, err := readSelected(filepath.Join(dir, "shmem_enabled"))
	if err != nil {
		return HugePages{}, err
	}
	defrag, err := readSelected(filepath.Join(dir, "defrag"))
	if err != nil {
		return HugePages{}, err
	}
	return HugePages{ShmemEnabled: shmem, Defrag: defrag, Sandbox: sandboxHugePages(shmem, defrag)}, nil
}

// sandboxHugePages is runsc's own rule (runsc/boot/loader.go,
// createMemoryFile): with shmem_enabled "advise" it asks for huge pages
// only where defrag would not make it compact memory where the host's
// own processes do not ("madvise" and "defer+madvise" would).
func sandboxHugePages(shmem, defrag string) bool {
	switch shmem {
	case "always", "within_size", "force":
		return true
	case "advise":
		return defrag == "always" || defrag == "defer" || defrag == "never"
	}
	return false
}

// String says what the settings mean for sandboxes.
func (h HugePages) String() string {
	if h.Sandbox {
		return fmt.Sprintf("sandbox memory in huge pages (shmem_enabled %s, defrag %s)", h.ShmemEnabled, h.Defrag)
	}
	return fmt.Sprintf("sandbox memory in 4 KiB pages (shmem_enabled %s, defrag %s): restores load memory about 3x slower and suspends take 1.5x longer; `stasis node tune` (or stasisd at start) sets shmem_enabled advise and defrag defer", h.ShmemEnabled, h.Defrag)
}

// ErrHugePagesDenied is returned when the host forbids shared memory huge
// pages (shmem_enabled "deny", an operator's emergency off), which Stasis
// never overrides.
var ErrHugePagesDenied = errors.New("shmem_enabled is deny: huge pages for shared memory are forbidden on this host")

// EnableSandboxHugePages changes the settings under dir, as little as
// runsc needs, so that sandboxes started afterwards use huge pages:
// shmem_enabled "never" becomes "advise" (which affects only memory that
// asks for huge pages, as runsc's does), and defrag "madvise" or
// "defer+madvise" becomes "defer" (regions that ask for huge pages no longer
// stall in direct compaction; kcompactd makes them in the background).
// Settings under which runsc already uses huge pages are left as they are.
// It returns the settings before and after. Sandboxes already running keep
// the pages they have.
func EnableSandboxHugePages(dir string) (before, after HugePages, err error) {
	before, err = ReadHugePages(dir)
	if err != nil {
		return before, before, err
	}
	changes, err := before.changes()
	if err != nil || len(changes) == 0 {
		return before, before, err
	}
	for _, c := range changes {
		if err := os.WriteFile(filepath.Join(dir, c.name), []byte(c.value), 0); err != nil {
			return before, before, fmt.Errorf("transparent huge pages: set %s to %s: %w", c.name, c.value, err)
		}
	}
	after, err = ReadHugePages(dir)
	if err == nil && !after.Sandbox {
		err = fmt.Errorf("transparent huge pages: runsc still would not use them after the change (shmem_enabled %s, defrag %s)", after.ShmemEnabled, after.Defrag)
	}
	return before, after, err
}

// setting is one value written to a file of HugePagesDir.
type setting struct{ name, value string }

// changes is what EnableSandboxHugePages writes, in order.
func (h HugePages) changes() ([]setting, error) {
	if h.Sandbox {
		return nil, nil
	}
	var out []setting
	switch h.ShmemEnabled {
	case "deny":
		return nil, ErrHugePagesDenied
	case "never":
		out = append(out, setting{"shmem_enabled", "advise"})
	}
	if h.Defrag == "madvise" || h.Defrag == "defer+madvise" {
		out = append(out, setting{"defrag", "defer"})
	}
	return out, nil
}

// readSelected reads a sysfs setting such as "always [madvise] never" and
// returns the value in brackets.
func readSelected(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("transparent huge pages: %w", err)
	}
	text := strings.TrimSpace(string(data))
	i, j := strings.IndexByte(text, '['), strings.IndexByte(text, ']')
	if i < 0 || j < i {
		return "", fmt.Errorf("transparent huge pages: %s: no selected value in %q", path, text)
	}
	return text[i+1 : j], nil
}
