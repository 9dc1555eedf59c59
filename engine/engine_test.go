package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// These tests drive real runsc sandboxes: they need root and runsc
// (scripts/install-runsc.sh) and use the systrap platform.

type fixture struct {
	t      *testing.T
	rt     *gvisor.Runsc
	eng    *engine.Engine
	obs    engine.Observer
	events []engine.Step
	mu     sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the engine tests run real runsc sandboxes and need root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatal("runsc is not on PATH: install it with scripts/install-runsc.sh")
	}
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: testactor.RunscRoot(t), Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, rt: rt}
	f.obs = engine.Observer{After: func(ev engine.Step) {
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
	}}
	f.eng = &engine.Engine{Runtime: rt}
	return f
}

// start creates and starts an actor from a fresh bundle.
func (f *fixture) start(id string, opts testactor.Options) engine.Actor {
	f.t.Helper()
	dir := testactor.Bundle(f.t, f.t.TempDir(), opts)
	a := engine.Actor{ID: id, Bundle: dir, ConsoleLog: filepath.Join(dir, "console.log")}
	for inside := range opts.Durable {
		a.DurableDirs = append(a.DurableDirs, inside)
	}
	ctx := context.Background()
	if err := f.rt.Create(ctx, id, dir, runtime.CreateOptions{ConsoleLog: a.ConsoleLog}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = f.rt.Delete(context.Background(), id) })
	if err := f.rt.Start(ctx, id); err != nil {
		f.t.Fatal(err)
	}
	return a
}

// counter runs "counter <cmd>" in the sandbox, waiting for the counter to
// listen, and returns its "<instance> <value>" answer.
func (f *fixture) counter(id, cmd string) string {
	f.t.Helper()
	res, err := f.rt.Exec(context.Background(), id, runtime.Process{Args: []string{"/counter", "await", cmd}})
	if err != nil || res.ExitCode != 0 {
		f.t.Fatalf("counter %s in %s: %v exit %d: %s", cmd, id, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func (f *fixture) incr(id string, n int) string {
	var last string
	for range n {
		last = f.counter(id, "incr")
	}
	return last
}

func instanceAndValue(s string) (string, string) {
	inst, val, _ := strings.Cut(s, " ")
	return inst, val
}

func (f *fixture) requireGone(id string) {
	f.t.Helper()
	if _, err := f.rt.State(context.Background(), id); !errors.Is(err, runtime.ErrNotFound) {
		f.t.Fatalf("container %s still exists after suspend: %v", id, err)
	}
}

func (f *fixture) requireRunning(id string) {
	f.t.Helper()
	st, err := f.rt.State(context.Background(), id)
	if err != nil || st.Status != runtime.StatusRunning {
		f.t.Fatalf("container %s: %+v %v; want running", id, st, err)
	}
}

func TestFullSuspendResumeCycles(t *testing.T) {
	f := newFixture(t)
	a := f.start("cycles", testactor.Options{})
	before := f.incr(a.ID, 3)
	inst, _ := instanceAndValue(before)
	if !strings.HasSuffix(before, " 3") {
		t.Fatalf("counter says %q", before)
	}
	ctx := context.Background()
	for cycle := 1; cycle <= 3; cycle++ {
		dir := filepath.Join(t.TempDir(), "snap")
		m, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Scope: snapshot.ScopeFull})
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		if m.Runtime.Version != f.rt.Info().Version || m.Node == nil || m.Node.Class() == "" || len(m.Files) == 0 || m.Scope != snapshot.ScopeFull {
			t.Fatalf("manifest %+v", m)
		}
		f.requireGone(a.ID)
		opts := engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}}
		if cycle == 3 {
			a = movedTo(a, "cycles-moved")
			t.Cleanup(func() { _ = f.rt.Delete(context.Background(), "cycles-moved") })
		}
		if _, err := f.eng.Resume(ctx, a, dir, opts); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		got := f.counter(a.ID, "incr")
		want := fmt.Sprintf("%s %d", inst, 3+cycle)
		if got != want {
			t.Fatalf("cycle %d: counter says %q, want %q (same process, count kept)", cycle, got, want)
		}
	}
	steps := map[string]bool{}
	for _, ev := range f.events {
		steps[ev.Op+"/"+ev.Name] = true
	}
	for _, s := range []string{"suspend/preflight", "suspend/checkpoint", "suspend/commit", "suspend/stop", "resume/verify", "resume/restore", "resume/probe"} {
		if !steps[s] {
			t.Errorf("no %s event; got %v", s, steps)
		}
	}
}

func TestDataScopeRestoresFolders(t *testing.T) {
	f := newFixture(t)
	host := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(host, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "sub", "notes.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := f.start("data", testactor.Options{Durable: map[string]string{"/data": host}})
	inst, _ := instanceAndValue(f.incr(a.ID, 2))
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir, Scope: snapshot.ScopeData})
	if err != nil {
		t.Fatal(err)
	}
	if m.DurableDirs["/data"] == "" {
		t.Fatalf("manifest durable folders %v", m.DurableDirs)
	}
	f.requireGone(a.ID)
	// Lose the folder's contents; the snapshot must bring them back.
	if err := os.RemoveAll(filepath.Join(host, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "stray"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{Command: []string{"/counter", "await", "get"}}}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(host, "sub", "notes.txt"))
	if err != nil || string(data) != "kept" {
		t.Fatalf("durable file after resume: %q %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(host, "stray")); err == nil {
		t.Error("a file written after the snapshot survived the restore")
	}
	newInst, val := instanceAndValue(f.counter(a.ID, "get"))
	if newInst == inst || val != "0" {
		t.Errorf("a Data resume is a cold boot: got instance %s value %s, before %s", newInst, val, inst)
	}
}

// tinyTmpfs mounts a 64 KiB tmpfs, too small for any sandbox image.
func tinyTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func TestPreflightRefusesTooLittleDisk(t *testing.T) {
	f := newFixture(t)
	a := f.start("preflight", testactor.Options{})
	f.incr(a.ID, 1)
	dir := filepath.Join(tinyTmpfs(t), "snap")
	_, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "short") {
		t.Fatalf("got %v; want a refusal naming the shortfall", err)
	}
	for _, ev := range f.events {
		if ev.Name == "checkpoint" {
			t.Fatal("a refused suspend reached the checkpoint")
		}
	}
	f.requireRunning(a.ID)
}

func TestCheckpointOutOfSpaceKeepsActorRunning(t *testing.T) {
	f := newFixture(t)
	ctl := t.TempDir()
	a := f.start("enospc", testactor.Options{FakeHelper: true, Ctl: ctl})
	a.GPU = true
	// The stand-in helper speaks the exec path's verbs, not the
	// cuda-checkpoint commands runsc's own CUDA step runs.
	f.eng.GPUPath = engine.GPUPathExec
	inst, _ := instanceAndValue(f.incr(a.ID, 4))
	// Let preflight pass so that the checkpoint itself runs out of space.
	f.eng.FreeDisk = func(string) (uint64, error) { return 1 << 40, nil }
	dir := filepath.Join(tinyTmpfs(t), "snap")
	_, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "checkpoint") || !strings.Contains(err.Error(), "GPU state resumed") {
		t.Fatalf("got %v; want a checkpoint failure with the GPU state resumed", err)
	}
	if calls, _ := os.ReadFile(filepath.Join(ctl, "calls")); string(calls) != "suspend\nresume\n" {
		t.Errorf("helper calls %q, want suspend then resume", calls)
	}
	f.requireRunning(a.ID)
	if got := f.counter(a.ID, "incr"); got != inst+" 5" {
		t.Fatalf("counter after the failed suspend: %q", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the failed snapshot folder still holds %d entries", len(entries))
	}
	// A retry into a folder with room works.
	f.eng.FreeDisk = nil
	good := filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: good}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if _, err := f.eng.Resume(context.Background(), a, good, engine.ResumeOptions{Observer: f.obs}); err != nil {
		t.Fatal(err)
	}
	if got := f.counter(a.ID, "incr"); got != inst+" 6" {
		t.Fatalf("counter after the retried suspend and resume: %q", got)
	}
}

func TestHelperFailureRollsBack(t *testing.T) {
	f := newFixture(t)
	ctl := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctl, "fail-suspend"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := f.start("helperfail", testactor.Options{FakeHelper: true, Ctl: ctl})
	a.GPU = true
	f.eng.GPUPath = engine.GPUPathExec
	inst, _ := instanceAndValue(f.incr(a.ID, 2))
	dir := filepath.Join(t.TempDir(), "snap")
	_, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "gpu-suspend") || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("got %v; want the helper's failure", err)
	}
	f.requireRunning(a.ID)
	if got := f.counter(a.ID, "incr"); got != inst+" 3" {
		t.Fatalf("counter: %q", got)
	}
	if _, err := snapshot.Load(dir); !errors.Is(err, snapshot.ErrNoManifest) {
		t.Errorf("a failed suspend left a snapshot: %v", err)
	}
}

func TestMissingHelperRefused(t *testing.T) {
	f := newFixture(t)
	a := f.start("nohelper", testactor.Options{})
	a.GPU = true
	_, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(t.TempDir(), "snap")})
	if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "helper") {
		t.Fatalf("got %v", err)
	}
	f.requireRunning(a.ID)
}

// killingRuntime kills the runsc checkpoint process as soon as it has begun
// writing the image: the first file created in the image folder.
type killingRuntime struct {
	*gvisor.Runsc
	t *testing.T
}

func (k killingRuntime) Checkpoint(ctx context.Context, id string, opts runtime.CheckpointOptions) error {
	if err := os.MkdirAll(opts.ImageDir, 0o700); err != nil {
		return err
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, opts.ImageDir, unix.IN_CREATE); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		buf := make([]byte, 4096)
		if n, _ := unix.Read(fd, buf); n > 0 {
			cancel()
		}
	}()
	return k.Runsc.Checkpoint(ctx, id, opts)
}

func TestCheckpointKilledMidwayLeavesActorRunning(t *testing.T) {
	f := newFixture(t)
	a := f.start("killed", testactor.Options{})
	inst, _ := instanceAndValue(f.incr(a.ID, 2))
	eng := &engine.Engine{Runtime: killingRuntime{f.rt, t}}
	dir := filepath.Join(t.TempDir(), "snap")
	_, err := eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err == nil {
		t.Fatal("the suspend whose checkpoint was killed succeeded")
	}
	f.requireRunning(a.ID)
	if got := f.counter(a.ID, "incr"); got != inst+" 3" {
		t.Fatalf("counter after the killed checkpoint: %q", got)
	}
	if _, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(t.TempDir(), "again")}); err != nil {
		t.Fatalf("a suspend after the killed one: %v", err)
	}
}

func TestCorruptSnapshotRefusedBeforeAnySandbox(t *testing.T) {
	f := newFixture(t)
	a := f.start("corrupt", testactor.Options{})
	f.incr(a.ID, 1)
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, m.Files[len(m.Files)-1].Path)
	info, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(target, info.Size()-1); err != nil {
		t.Fatal(err)
	}
	_, err = f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs})
	if !errors.Is(err, engine.ErrRefused) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("got %v; want a refusal naming the truncated file", err)
	}
	f.requireGone(a.ID)

	if err := os.Remove(filepath.Join(dir, snapshot.ManifestName)); err != nil {
		t.Fatal(err)
	}
	_, err = f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs})
	if !errors.Is(err, snapshot.ErrNoManifest) {
		t.Fatalf("got %v; want ErrNoManifest", err)
	}
	f.requireGone(a.ID)
}

func TestFailedResumeCleansUpAndKeepsSnapshot(t *testing.T) {
	f := newFixture(t)
	a := f.start("probefail", testactor.Options{})
	inst, _ := instanceAndValue(f.incr(a.ID, 5))
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	bad := engine.Probe{Command: []string{"/counter", "no-such-command"}, Timeout: 300e6}
	_, err := f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs, Probe: bad})
	if err == nil || !strings.Contains(err.Error(), "probe") {
		t.Fatalf("got %v; want a probe failure", err)
	}
	f.requireGone(a.ID)
	if _, err := snapshot.Verify(context.Background(), dir); err != nil {
		t.Fatalf("the snapshot changed: %v", err)
	}
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer ready.Close()
	if _, err := f.eng.Resume(context.Background(), a, dir, engine.ResumeOptions{Observer: f.obs, Probe: engine.Probe{URL: ready.URL}}); err != nil {
		t.Fatal(err)
	}
	if got := f.counter(a.ID, "incr"); got != inst+" 6" {
		t.Fatalf("counter: %q", got)
	}
}

// failingStop is a runtime whose Stop fails, as when the sandbox process
// cannot be killed.
type failingStop struct{ *gvisor.Runsc }

func (failingStop) Stop(context.Context, string) error { return errors.New("injected: stop failed") }

func TestFailedStopKeepsSnapshotAndActor(t *testing.T) {
	f := newFixture(t)
	a := f.start("stopfail", testactor.Options{})
	inst, _ := instanceAndValue(f.incr(a.ID, 1))
	eng := &engine.Engine{Runtime: failingStop{f.rt}}
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "was committed") || !strings.Contains(err.Error(), "keeps running") {
		t.Fatalf("got %v; want the committed snapshot and the running actor named", err)
	}
	if m == nil {
		t.Fatal("no manifest returned for the committed snapshot")
	}
	if _, err := snapshot.Verify(context.Background(), dir); err != nil {
		t.Fatalf("the committed snapshot was not kept whole: %v", err)
	}
	f.requireRunning(a.ID)
	if got := f.counter(a.ID, "incr"); got != inst+" 2" {
		t.Fatalf("counter: %q", got)
	}
}

// movedTo is actor a, called as before, in a sandbox of another id (a
// resume into a new sandbox).
func movedTo(a engine.Actor, id string) engine.Actor {
	a.Name, a.ID = a.Label(), id
	return a
}
