package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/conformance"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// The runsc builds scripts/install-runsc.sh installs, and what each can do.
var knownBuilds = map[string]struct {
	cudaCheckpointPath, direct bool
	knowsDriver, lacksDriver   string
}{
	// The default: September 2026.
	"v0.0.0-20260905035102-160fafc42237": {cudaCheckpointPath: true, direct: true, knowsDriver: "580.159.04"},
	// The "no flag" reference: May 2026.
	"v0.0.0-20260527191743-a81fd9dd382e": {direct: true, knowsDriver: "580.126.20", lacksDriver: "580.159.04"},
}

func newRunsc(t *testing.T, cfg Config) *Runsc {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not on PATH: install it with scripts/install-runsc.sh")
	}
	cfg.Root = testactor.RunscRoot(t)
	r, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDetect reads what the runsc on PATH (either build the project
// installs) can do from its own help, and checks it against what that
// build is known to have.
func TestDetect(t *testing.T) {
	f := newRunsc(t, Config{}).Features()
	want, ok := knownBuilds[f.Version]
	if !ok {
		t.Fatalf("runsc version %q is not one scripts/install-runsc.sh installs", f.Version)
	}
	if f.CudaCheckpointPath != want.cudaCheckpointPath || f.CudaCheckpointSequential != want.cudaCheckpointPath || f.Direct != want.direct || f.ExcludeCommittedZeroPages != want.direct {
		t.Errorf("features %+v of %s: want --cuda-checkpoint-path %v, --direct %v", f, f.Version, want.cudaCheckpointPath, want.direct)
	}
	if !f.SaveRestoreExecArgv || !f.Background {
		t.Errorf("features %+v: want -save-restore-exec-argv and restore -background", f)
	}
	if !slices.Contains(f.Compression, "flate-best-speed") {
		t.Errorf("compression %v", f.Compression)
	}
	if !slices.Contains(f.NvproxyDrivers, want.knowsDriver) || want.lacksDriver != "" && slices.Contains(f.NvproxyDrivers, want.lacksDriver) {
		t.Errorf("nvproxy drivers %v: want %s and not %q", f.NvproxyDrivers, want.knowsDriver, want.lacksDriver)
	}
	caps := newRunsc(t, Config{}).Capabilities()
	if caps.CUDACheckpoint != want.cudaCheckpointPath || caps.Direct != want.direct {
		t.Errorf("capabilities %+v of %s", caps, f.Version)
	}
}

// TestInfoRecordsTheABIInUse: the ABI a GPU sandbox runs with is the host
// driver's own when runsc knows it (no flag, no notice), the configured one
// otherwise.
func TestInfoRecordsTheABIInUse(t *testing.T) {
	r := &Runsc{features: Features{NvproxyDrivers: []string{"580.126.20", "580.159.04"}}}
	r.cfg.HostDriverVersion = "580.159.04"
	if abi := r.Info().GPUABI; abi != "580.159.04" || r.NvproxyNotice() != "" {
		t.Errorf("a driver runsc knows: ABI %q, notice %q", abi, r.NvproxyNotice())
	}
	r.features.NvproxyDrivers = []string{"580.126.20"}
	r.cfg.NvproxyDriverVersion = "580.126.20"
	if abi := r.Info().GPUABI; abi != "580.126.20" || r.NvproxyNotice() == "" {
		t.Errorf("a driver runsc does not know: ABI %q, notice %q", abi, r.NvproxyNotice())
	}
	r.cfg = Config{}
	if abi := r.Info().GPUABI; abi != "" {
		t.Errorf("no driver: ABI %q", abi)
	}
}

// TestCheckpointFlags: what the runsc in hand lacks is refused with the
// fix, before runsc is run.
func TestCheckpointFlags(t *testing.T) {
	r := &Runsc{path: "/nonexistent/runsc", features: Features{Version: "v0"}}
	err := r.Checkpoint(context.Background(), "a1", runtime.CheckpointOptions{ImageDir: t.TempDir() + "/img", CUDACheckpointPath: "/.stasis/bin/stasis-cuda"})
	if err == nil || !strings.Contains(err.Error(), "--cuda-checkpoint-path") || !strings.Contains(err.Error(), "install-runsc.sh") {
		t.Fatalf("the CUDA flag on a runsc without it: %v", err)
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

// TestFullDiskIsResourceExhausted: runsc failing on a full disk (its
// state file, a checkpoint's image) is resource_exhausted, the cause kept.
func TestFullDiskIsResourceExhausted(t *testing.T) {
	r := &Runsc{path: "runsc"}
	said := "creating container: saving container metadata: writing json file: write /var/lib/stasis/runsc/+a1+_sandbox:+a1+.state: no space left on device"
	err := r.commandError(context.Background(), []string{"restore", "+a1+"}, errors.New("exit status 128"), said)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "make room") {
		t.Fatalf("got %v; want resource_exhausted naming the full disk", err)
	}
}

// TestDeleteWithItsFilestoreGone: runsc delete reports a container's
// rootfs filestore file that is not there as a failure, after it stopped
// the sandbox and removed the container's state (seen on the May runsc when
// a restored actor was paused again). Delete takes the container as
// deleted, and still fails on anything else runsc reports.
func TestDeleteWithItsFilestoreGone(t *testing.T) {
	ctx := context.Background()
	r := newRunsc(t, Config{Network: "none"})
	bundle := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	const id = "filestore-gone"
	t.Cleanup(func() { _ = r.Delete(context.Background(), id) })
	if err := r.Create(ctx, id, bundle, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	filestore := filepath.Join(bundle, "rootfs", ".gvisor.filestore."+id)
	if _, err := os.Stat(filestore); err != nil {
		t.Fatalf("the sandbox's rootfs filestore: %v", err)
	}
	if err := r.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filestore); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete with the filestore file already gone: %v", err)
	}
	if _, err := r.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("the container after Delete: %v; want it gone", err)
	}

	said := "destroying container: failed to delete filestore file \"/b/rootfs/.gvisor.filestore.k1\": remove /b/rootfs/.gvisor.filestore.k1: no such file or directory"
	if !onlyMissingFilestores(said) {
		t.Errorf("a missing filestore file alone not recognised: %q", said)
	}
	for _, other := range []string{
		said + "\nstopping container: killing sandbox: operation not permitted",
		"destroying container: failed to delete filestore file \"/b/rootfs/.gvisor.filestore.k1\": remove /b/rootfs/.gvisor.filestore.k1: permission denied",
		"destroying container: deleting container state files: device or resource busy",
		"loading container: permission denied",
	} {
		if onlyMissingFilestores(other) {
			t.Errorf("taken for a missing filestore file alone: %q", other)
		}
	}
}

// TestOpenFilesFoundThroughTheBundle: the files a running sandbox holds
// are listed as paths inside the container (its program among them), each
// of which the bundle maps to a file on the host; a container that does
// not exist is not found. The ids are of the form stasisd gives (the
// actor's between two '+') for actors whose ids hold dots and share a
// prefix.
func TestOpenFilesFoundThroughTheBundle(t *testing.T) {
	ctx := context.Background()
	r := newRunsc(t, Config{Network: "none"})
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	const id, longer = "+open.files+", "+open.files.2+"
	for _, c := range []string{longer, id} {
		startSandbox(t, r, dir, c)
	}
	files, err := r.OpenFiles(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, "/counter") {
		t.Fatalf("open files %q lack the sandbox's program", files)
	}
	spec, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Lstat(bundle.HostPathOf(spec, dir, f)); err != nil {
			t.Errorf("open file %s: %v", f, err)
		}
	}
	if _, err := r.OpenFiles(ctx, "no-such-container"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("open files of a container that does not exist: %v", err)
	}
}

func TestInsideCandidates(t *testing.T) {
	for target, want := range map[string][]string{
		"/root/usr/lib/x.so": {"/root/usr/lib/x.so", "/usr/lib/x.so"},
		"/counter":           {"/counter"},
		"/a/b":               {"/a/b", "/b"},
	} {
		if got := insideCandidates(target); !slices.Equal(got, want) {
			t.Errorf("insideCandidates(%q) = %q, want %q", target, got, want)
		}
	}
}
