package microvm_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/conformance"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/testkit/testdisk"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// standIn is the device the tests detach and attach where a GPU would be:
// a second virtio-serial controller, whose guest driver binds to it as the
// NVIDIA driver binds to a GPU (virtio-rng's driver in the Debian 6.1 guest
// kernel can crash when unplugged twice in one boot: docs/microvm.md).
// 1af4:1003 is its PCI id as the guest lists it; the agent's port is on
// the first such controller.
var standIn = microvm.Device{ID: "gpu0", Driver: "virtio-serial-pci"}

const standInPCIID = "1af4:1003@"

type fixture struct {
	t      *testing.T
	rt     *microvm.Runtime
	eng    *engine.Engine
	obs    engine.Observer
	mu     sync.Mutex
	events []engine.Step
}

func newFixture(t *testing.T, cfg microvm.Config) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the micro-VM tests run QEMU with root's tmpfs mounts and need root")
	}
	// Unix socket paths are short; t.TempDir's can be long.
	root, err := os.MkdirTemp("", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	cfg.Root = root
	cfg.ProbeKernel, _ = vmtest.Guest(t)
	rt, err := microvm.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accelerator %s", rt.AccelReason())
	f := &fixture{t: t, rt: rt}
	f.obs = engine.Observer{After: func(ev engine.Step) {
		f.mu.Lock()
		f.events = append(f.events, ev)
		f.mu.Unlock()
		t.Logf("%s %s %s %.2fs %s %s", ev.Actor, ev.Op, ev.Name, ev.Duration.Seconds(), ev.Message, ev.Err)
	}}
	f.eng = &engine.Engine{Runtime: rt}
	return f
}

// boot creates and starts a VM actor, removed when the test ends.
func (f *fixture) boot(id string, opts vmtest.Options) engine.Actor {
	f.t.Helper()
	dir := vmtest.Bundle(f.t, f.t.TempDir(), opts)
	log := filepath.Join(f.t.TempDir(), "console.log")
	ctx := context.Background()
	f.t.Cleanup(func() {
		if err := f.rt.Delete(context.Background(), id); err != nil {
			f.t.Errorf("delete %s: %v", id, err)
		}
		if f.t.Failed() {
			data, _ := os.ReadFile(log)
			f.t.Logf("console of %s:\n%s", id, data)
		}
	})
	if err := f.rt.Create(ctx, id, dir, runtime.CreateOptions{ConsoleLog: log}); err != nil {
		f.t.Fatal(err)
	}
	if err := f.rt.Start(ctx, id); err != nil {
		f.t.Fatal(err)
	}
	return engine.Actor{ID: id, Bundle: dir, GPU: true, ConsoleLog: log}
}

// counter runs "counter await VERB" in the guest and returns its answer,
// "<process id> <value>".
func (f *fixture) counter(id, verb string) string {
	f.t.Helper()
	return strings.TrimSpace(f.run(id, "/counter", "await", verb))
}

// sh runs a busybox shell command in the guest.
func (f *fixture) sh(id, script string) {
	f.t.Helper()
	f.run(id, "sh", "-c", script)
}

// run runs a command in the guest and returns its output; the test fails
// unless it exits 0.
func (f *fixture) run(id string, args ...string) string {
	f.t.Helper()
	res, err := f.rt.Exec(context.Background(), id, runtime.Process{Args: args})
	if err != nil {
		f.t.Fatal(err)
	}
	if res.ExitCode != 0 {
		f.t.Fatalf("%q exited %d: %s", args, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

// hasStandIn says whether the guest lists the stand-in device.
func (f *fixture) hasStandIn(id string) bool {
	f.t.Helper()
	facts, err := f.rt.Facts(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, d := range facts.PCIDevices {
		if strings.HasPrefix(d, standInPCIID) {
			n++
		}
	}
	return n > 1 // the agent's controller and the stand-in
}

func (f *fixture) status(id string) runtime.Status {
	f.t.Helper()
	st, err := f.rt.State(context.Background(), id)
	if errors.Is(err, runtime.ErrNotFound) {
		return "absent"
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Status
}

func (f *fixture) stepsOf(op string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var steps []string
	for _, ev := range f.events {
		if ev.Op == op {
			steps = append(steps, ev.Name)
		}
	}
	f.events = nil
	return steps
}

func TestSuspendResumeKeepsTheGuestsMemory(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	ctx := context.Background()
	a := f.boot("counter", vmtest.Options{Devices: []microvm.Device{standIn}})
	for range 3 {
		f.counter(a.ID, "incr")
	}
	before := f.counter(a.ID, "get")
	if !strings.HasSuffix(before, " 3") || !f.hasStandIn(a.ID) {
		t.Fatalf("before suspend: counter %q, stand-in device listed %v", before, f.hasStandIn(a.ID))
	}
	snap := filepath.Join(t.TempDir(), "snap")
	m, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: snap})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.stepsOf("suspend"), []string{"preflight", "gpu-suspend", "detach-devices", "checkpoint", "commit", "stop", "delete"}; !slices.Equal(got, want) {
		t.Errorf("suspend steps %v, want %v", got, want)
	}
	if s := f.status(a.ID); s != "absent" {
		t.Errorf("after suspend the VM is %s, want it gone", s)
	}
	if m.Runtime.Name != "qemu-microvm" {
		t.Errorf("manifest runtime %q", m.Runtime.Name)
	}
	if _, err := f.eng.Resume(ctx, a, snap, engine.ResumeOptions{Observer: f.obs}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.stepsOf("resume"), []string{"verify", "compatibility", "restore", "attach-devices", "gpu-resume"}; !slices.Equal(got, want) {
		t.Errorf("resume steps %v, want %v", got, want)
	}
	if after := f.counter(a.ID, "get"); after != before {
		t.Fatalf("after resume the counter says %q, want %q (the same process and value)", after, before)
	}
	if after := f.counter(a.ID, "incr"); !strings.HasSuffix(after, " 4") {
		t.Fatalf("incr after resume: %q, want the count to go on to 4", after)
	}
	if !f.hasStandIn(a.ID) {
		t.Fatal("after resume the guest does not list the stand-in device")
	}

	// Images a restore refuses before any QEMU starts.
	for _, c := range []struct {
		name, key string
		value     any
		want      string
	}{
		{"another QEMU", "qemu", "QEMU emulator version 1.0", `written by "QEMU emulator version 1.0"`},
		{"kernel outside the image", "spec.kernel", "../../../../etc/passwd", "leaves the image folder"},
	} {
		image := filepath.Join(t.TempDir(), "image")
		if err := os.CopyFS(image, os.DirFS(filepath.Join(snap, "image"))); err != nil {
			t.Fatal(err)
		}
		editJSON(t, filepath.Join(image, "vm.json"), c.key, c.value)
		err := f.rt.Restore(ctx, "tampered", runtime.RestoreOptions{ImageDir: image, Bundle: a.Bundle})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: restore %v, want it refused with %q", c.name, err, c.want)
		}
		if s := f.status("tampered"); s != "absent" {
			t.Errorf("%s: a refused restore left a VM that is %s", c.name, s)
		}
	}
}

// editJSON sets one field (a.b for nested) of a JSON file.
func editJSON(t *testing.T, path, key string, value any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	obj := doc
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		obj = obj[p].(map[string]any)
	}
	obj[parts[len(parts)-1]] = value
	if data, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFailedStepsLeaveTheVMRunningOrTheSnapshotIntact fails each step of a
// suspend and a resume for real and checks where the actor is left.
func TestFailedStepsLeaveTheVMRunningOrTheSnapshotIntact(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	ctx := context.Background()
	a := f.boot("steps", vmtest.Options{Devices: []microvm.Device{standIn}})
	// A stand-in stasis-cuda runs in the guest once it has an NVIDIA
	// device file; it logs its calls to /stasis-ctl/calls and fails a verb
	// while /stasis-ctl/fail-VERB exists.
	f.sh(a.ID, "mkdir -p /stasis-ctl && touch /dev/nvidiactl")
	f.counter(a.ID, "incr")
	if rep, err := f.rt.GPUStatus(ctx, a.ID); err != nil || rep.Op != "status" || rep.Skipped != "" {
		t.Fatalf("GPU status through the agent: %+v %v", rep, err)
	}

	stillRunning := func(step string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "the actor keeps running") {
			t.Fatalf("%s: suspend error %v, want it to name %q and say the actor keeps running", step, err, want)
		}
		if s := f.status(a.ID); s != runtime.StatusRunning {
			t.Fatalf("%s: the VM is %s, want running", step, s)
		}
		if !f.hasStandIn(a.ID) {
			t.Fatalf("%s: the guest lost the stand-in device", step)
		}
		f.counter(a.ID, "incr")
	}

	// The GPU step fails: nothing else is touched.
	f.sh(a.ID, "touch /stasis-ctl/fail-suspend")
	_, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(t.TempDir(), "s1")})
	stillRunning("gpu-suspend", err, "injected failure: suspend")
	f.sh(a.ID, "rm /stasis-ctl/fail-suspend")

	// The checkpoint fails on a full disk after the device was detached:
	// the device comes back and the GPU state is resumed.
	full := t.TempDir()
	testdisk.Tmpfs(t, full, "1m")
	f.eng.FreeDisk = func(string) (uint64, error) { return 1 << 40, nil } // get past the preflight's disk check
	_, err = f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(full, "s2")})
	f.eng.FreeDisk = nil
	stillRunning("checkpoint", err, "checkpoint")
	if got, want := f.stepsOf("suspend"), []string{"preflight", "gpu-suspend", "gpu-resume", "preflight", "gpu-suspend", "detach-devices", "checkpoint", "attach-devices", "gpu-resume"}; !slices.Equal(got, want) {
		t.Errorf("steps of the failed suspends %v, want %v", got, want)
	}

	// A suspend into a good folder works after both failures.
	want := f.counter(a.ID, "get")
	snap := filepath.Join(t.TempDir(), "snap")
	if _, err := f.eng.Suspend(ctx, a, engine.SuspendOptions{Observer: f.obs, Dir: snap}); err != nil {
		t.Fatal(err)
	}

	// Resume onto a node whose bundle names a device this host lacks: the
	// attach fails, the new VM is removed, the snapshot is untouched.
	missing := vmtest.Bundle(t, t.TempDir(), vmtest.Options{Devices: []microvm.Device{{ID: "gpu0", Driver: "vfio-pci", Props: map[string]string{"host": "0000:ff:1f.7"}}}})
	_, err = f.eng.Resume(ctx, engine.Actor{ID: a.ID, Bundle: missing, GPU: true}, snap, engine.ResumeOptions{Observer: f.obs})
	if err == nil || !strings.Contains(err.Error(), "attach-devices") || !strings.Contains(err.Error(), "0000:ff:1f.7") {
		t.Fatalf("resume with a missing host device: %v, want the attach to fail naming it", err)
	}
	if s := f.status(a.ID); s != "absent" {
		t.Fatalf("after a failed attach the new VM is %s, want it removed", s)
	}

	// A snapshot whose migration stream is corrupt (sizes intact) fails in
	// QEMU's restore; the new VM is removed.
	bad := t.TempDir()
	if err := os.CopyFS(bad, os.DirFS(snap)); err != nil {
		t.Fatal(err)
	}
	corrupt(t, filepath.Join(bad, "image", "vm.state"))
	_, err = f.eng.Resume(ctx, a, bad, engine.ResumeOptions{Observer: f.obs, Verify: engine.VerifySizes})
	if err == nil || !strings.Contains(err.Error(), "restore") || !strings.Contains(err.Error(), "does not load") {
		t.Fatalf("resume of a corrupt stream: %v, want the restore to fail", err)
	}
	if s := f.status(a.ID); s != "absent" {
		t.Fatalf("after a failed restore the new VM is %s, want it removed", s)
	}

	// The snapshot itself still verifies and resumes.
	if _, err := f.eng.Resume(ctx, a, snap, engine.ResumeOptions{Observer: f.obs}); err != nil {
		t.Fatal(err)
	}
	if got := f.counter(a.ID, "get"); got != want {
		t.Fatalf("after the failed resumes the counter says %q, want %q", got, want)
	}
	if !f.hasStandIn(a.ID) {
		t.Fatal("after resume the guest does not list the stand-in device")
	}
}

// TestDetachFailureAttachesTheOthersAgain gives the VM a device that
// cannot be unplugged after one that can: the suspend fails at the second,
// and the first comes back.
func TestDetachFailureAttachesTheOthersAgain(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	fixed := microvm.Device{ID: "fixed0", Driver: "pc-testdev"} // an ISA device: its bus has no hotplug
	a := f.boot("detach", vmtest.Options{Devices: []microvm.Device{standIn, fixed}})
	before := f.counter(a.ID, "incr")
	_, err := f.eng.Suspend(context.Background(), a, engine.SuspendOptions{Observer: f.obs, Dir: filepath.Join(t.TempDir(), "snap")})
	if err == nil || !strings.Contains(err.Error(), "detach fixed0") || !strings.Contains(err.Error(), "the actor keeps running") {
		t.Fatalf("suspend: %v, want the detach of fixed0 to fail and the actor kept running", err)
	}
	if got, want := f.stepsOf("suspend"), []string{"preflight", "gpu-suspend", "detach-devices", "attach-devices", "gpu-resume"}; !slices.Equal(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	if !f.hasStandIn(a.ID) {
		t.Fatal("the stand-in device was not attached again")
	}
	if after := f.counter(a.ID, "incr"); strings.Fields(after)[0] != strings.Fields(before)[0] {
		t.Fatalf("counter %q after %q: not the same process", after, before)
	}
}

func TestGuestWithoutAgent(t *testing.T) {
	f := newFixture(t, microvm.Config{BootTimeout: 15 * time.Second})
	dir := vmtest.Bundle(t, t.TempDir(), vmtest.Options{Cmdline: "stasis.agent=off"})
	ctx := context.Background()
	t.Cleanup(func() { _ = f.rt.Delete(context.Background(), "noagent") })
	if err := f.rt.Create(ctx, "noagent", dir, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := f.rt.Start(ctx, "noagent")
	if err == nil || !strings.Contains(err.Error(), "the guest agent did not open its port org.stasis.agent within 15s") || !strings.Contains(err.Error(), "stasis-agent") {
		t.Fatalf("start of a guest without an agent: %v", err)
	}
	if s := f.status("noagent"); s != runtime.StatusRunning {
		t.Fatalf("the guest without an agent is %s, want it running (only its agent is missing)", s)
	}
	if err := f.rt.Delete(ctx, "noagent"); err != nil {
		t.Fatal(err)
	}
	if s := f.status("noagent"); s != "absent" {
		t.Fatalf("after delete the VM is %s", s)
	}
}

// corrupt overwrites a run of bytes in the middle of the file, keeping its
// size.
func corrupt(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = 0xA5
	}
	if _, err := f.WriteAt(junk, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the runtime suite on real QEMU micro-VMs, each
// with the stand-in device, which the DeviceHolder case detaches and
// attaches again.
func TestConformance(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	conformance.Run(t, conformance.Harness{
		Runtime: f.rt,
		Bundle: func(t *testing.T) string {
			return vmtest.Bundle(t, t.TempDir(), vmtest.Options{Devices: []microvm.Device{standIn}})
		},
		Counter: func(verb string) []string { return []string{"/counter", "await", verb} },
	})
}

// TestSilentGuestFailsFast: a guest that prints nothing on its console
// and never opens its agent's port (here its /init is a shell on another
// console; on a host whose KVM opens but runs no guest, the same silence)
// is given up on at SilentBoot, with the reason, not after the two-minute
// boot timeout.
func TestSilentGuestFailsFast(t *testing.T) {
	f := newFixture(t, microvm.Config{SilentBoot: 5 * time.Second})
	// loglevel=0: under TCG on a loaded host the kernel warns on the
	// serial console even with quiet (its timers run late), which would
	// make this guest not silent.
	dir := vmtest.Bundle(t, t.TempDir(), vmtest.Options{Cmdline: "console=tty0 rdinit=/bin/sh loglevel=0"})
	ctx := context.Background()
	t.Cleanup(func() { _ = f.rt.Delete(context.Background(), "silent") })
	console := filepath.Join(t.TempDir(), "console.log")
	if err := f.rt.Create(ctx, "silent", dir, runtime.CreateOptions{ConsoleLog: console}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := f.rt.Start(ctx, "silent")
	if err == nil || !strings.Contains(err.Error(), "printed nothing on its console") || !strings.Contains(err.Error(), "within 5s") {
		printed, _ := os.ReadFile(console)
		t.Fatalf("start of a silent guest: %v; its console:\n%s", err, printed)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the silent guest was given up on after %s", took)
	}
}

// TestGuestWithAnotherInitFailsFast: a guest whose /init is not
// stasis-agent (here a shell, which prints its prompt on the console and
// waits) is given up on three SilentBoots after it first printed, with
// the console's last lines, not at the two-minute boot timeout. SilentBoot
// is 10 s: under TCG on a loaded host (CI runs this beside the integration
// tests) a kernel may print its first line more than 5 s after QEMU starts.
func TestGuestWithAnotherInitFailsFast(t *testing.T) {
	f := newFixture(t, microvm.Config{SilentBoot: 10 * time.Second})
	dir := vmtest.Bundle(t, t.TempDir(), vmtest.Options{Cmdline: "console=ttyS0 rdinit=/bin/sh"})
	ctx := context.Background()
	t.Cleanup(func() { _ = f.rt.Delete(context.Background(), "other") })
	console := filepath.Join(t.TempDir(), "console.log")
	if err := f.rt.Create(ctx, "other", dir, runtime.CreateOptions{ConsoleLog: console}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := f.rt.Start(ctx, "other")
	if err == nil || !strings.Contains(err.Error(), "without a word from stasis-agent") || !strings.Contains(err.Error(), "for 30s") {
		printed, _ := os.ReadFile(console)
		t.Fatalf("start of a guest whose /init is a shell: %v; its console:\n%s", err, printed)
	}
	if took := time.Since(start); took > 90*time.Second {
		t.Fatalf("given up on after %s", took)
	}
	t.Logf("given up on after %s: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestGuestWhoseKernelGivesUpFailsFast: a guest whose kernel finds no init
// it can run (it panics, saying so on its console) is given up on as the
// console says it, with its last lines, not at the boot timeout.
func TestGuestWhoseKernelGivesUpFailsFast(t *testing.T) {
	f := newFixture(t, microvm.Config{})
	dir := vmtest.Bundle(t, t.TempDir(), vmtest.Options{Cmdline: "rdinit=/no/such/init init=/no/such/init"})
	ctx := context.Background()
	t.Cleanup(func() { _ = f.rt.Delete(context.Background(), "panics") })
	console := filepath.Join(t.TempDir(), "console.log")
	if err := f.rt.Create(ctx, "panics", dir, runtime.CreateOptions{ConsoleLog: console}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := f.rt.Start(ctx, "panics")
	if err == nil || !strings.Contains(err.Error(), "the guest's kernel gave up at boot") || !strings.Contains(err.Error(), "Kernel panic") {
		printed, _ := os.ReadFile(console)
		t.Fatalf("start of a guest whose kernel gives up: %v; its console:\n%s", err, printed)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("given up on after %s, not as the console said it", took)
	}
	t.Logf("given up on after %s: %v", time.Since(start).Round(time.Millisecond), err)
}
