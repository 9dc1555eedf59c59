package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/internal/testactor"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/conformance"
)

// pinnedVersion is what scripts/install-runsc.sh installs.
const pinnedVersion = "v0.0.0-20260527191743-a81fd9dd382e"

func newRunsc(t *testing.T, cfg Config) *Runsc {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not on PATH: install it with scripts/install-runsc.sh")
	}
	cfg.Root = t.TempDir()
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestDetectPinnedRunsc(t *testing.T) {
	f := newRunsc(t, Config{}).Features()
	if f.Version != pinnedVersion {
		t.Errorf("version %q, want the pinned %s", f.Version, pinnedVersion)
	}
	if f.CudaCheckpointPath {
		t.Error("the pinned runsc has no --cuda-checkpoint-path, but it was detected")
	}
	if !f.SaveRestoreExecArgv || !f.Background {
		t.Errorf("features %+v: want -save-restore-exec-argv and restore -background", f)
	}
	if !slices.Contains(f.Compression, "flate-best-speed") {
		t.Errorf("compression %v", f.Compression)
	}
	if !slices.Contains(f.NvproxyDrivers, "580.126.20") || slices.Contains(f.NvproxyDrivers, "580.159.04") {
		t.Errorf("nvproxy drivers %v: want 580.126.20 and not 580.159.04", f.NvproxyDrivers)
	}
}

func TestNvproxyABIChoice(t *testing.T) {
	r := &Runsc{features: Features{NvproxyDrivers: []string{"570.172.08", "580.105.08", "580.126.20", "590.48.01"}}}
	r.cfg.HostDriverVersion = "580.126.20"
	if abi, err := r.nvproxyABI(); abi != "" || err != nil || r.NvproxyNotice() != "" {
		t.Errorf("a known driver: abi %q err %v notice %q; want the host's own", abi, err, r.NvproxyNotice())
	}
	r.cfg.HostDriverVersion = "580.159.04"
	_, err := r.nvproxyABI()
	if err == nil || !strings.Contains(err.Error(), "580.159.04") || !strings.Contains(err.Error(), "newest it knows of the same branch is 580.126.20") {
		t.Errorf("an unknown driver with no ABI configured: %v", err)
	}
	r.cfg.NvproxyDriverVersion = "580.126.20"
	abi, err := r.nvproxyABI()
	if abi != "580.126.20" || err != nil {
		t.Errorf("configured ABI: %q %v", abi, err)
	}
	if n := r.NvproxyNotice(); !strings.Contains(n, "580.159.04") || !strings.Contains(n, "580.126.20") {
		t.Errorf("notice %q must name both versions", n)
	}
}

func TestNewWithoutRunscNamesTheFix(t *testing.T) {
	_, err := New(context.Background(), Config{Runsc: "/nonexistent/runsc", Root: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "install-runsc.sh") {
		t.Fatalf("got %v", err)
	}
}

// TestConformance runs the runtime suite on real runsc sandboxes.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Runtime: newRunsc(t, Config{Network: "none"}),
		Bundle:  func(t *testing.T) string { return testactor.Bundle(t, t.TempDir(), testactor.Options{}) },
		Counter: func(verb string) []string { return []string{"/counter", "await", verb} },
	})
}

func TestCheckpointRefusesUsedFolder(t *testing.T) {
	r := newRunsc(t, Config{})
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/pages.img", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := r.Checkpoint(context.Background(), "any", runtime.CheckpointOptions{ImageDir: dir})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("got %v", err)
	}
}

func TestTrimRunscOutputDropsStackDumps(t *testing.T) {
	said := "checkpoint failed: checkpointing container \"main\": error serializing object: no space left on device:\ngoroutine 58 [running]:\ngvisor.dev/gvisor/pkg/state.safely.func1()\n"
	got := trimRunscOutput(said)
	if got != "checkpoint failed: checkpointing container \"main\": error serializing object: no space left on device" {
		t.Errorf("got %q", got)
	}
	if long := trimRunscOutput(strings.Repeat("x", 5000)); len(long) > maxSaid+10 {
		t.Errorf("an unbounded message: %d bytes", len(long))
	}
}

// TestHalfDeletedContainerIsGone: the state file vanishing under runsc (a
// runsc delete killed half way) reads as a container that is not there, so
// that it is cleaned up rather than failing the caller.
func TestHalfDeletedContainerIsGone(t *testing.T) {
	r := &Runsc{path: "runsc"}
	said := "FetchSpec failed: loading container: open /var/lib/stasis/runsc/k1_sandbox:k1.state: no such file or directory"
	err := r.commandError(context.Background(), []string{"state", "k1"}, errors.New("exit status 128"), said)
	if !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("got %v; want ErrNotFound", err)
	}
	other := r.commandError(context.Background(), []string{"state", "k1"}, errors.New("exit status 128"), "loading container: permission denied")
	if errors.Is(other, runtime.ErrNotFound) {
		t.Fatalf("another failure read as not found: %v", other)
	}
}
