package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/testkit/testdisk"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// These tests run micro-VM actors through a real stasisd, its CLI and real
// QEMU (TCG where KVM cannot boot a guest, as on CI), beside gVisor
// actors; the guest is vmtest's (the counter, the stand-in stasis-cuda)
// and the stand-in device a second virtio-serial controller (virtio-rng's
// guest driver in the Debian 6.1 kernel can crash when unplugged twice in
// one boot: docs/microvm.md).

// vmDaemon is a stasisd that runs micro-VMs, their state folder under the
// test's own; no QEMU outlives the test.
func vmDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	d := newDaemon(t, append(microVMFlags(t), extra...)...)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		logs, _ := filepath.Glob(filepath.Join(d.data, "actors", "*", "console.log"))
		for _, l := range logs {
			data, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, data)
		}
	})
	return d
}

// microVMFlags are the stasisd flags that run micro-VMs, their state
// folder short (for unix sockets) and removed, with every QEMU in it, when
// the test ends.
func microVMFlags(t *testing.T) []string {
	t.Helper()
	root, err := os.MkdirTemp("", "vm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = killProcesses(func(cmdline string) bool {
			return strings.Contains(cmdline, "qemu") && strings.Contains(cmdline, root+"/")
		})
		os.RemoveAll(root)
	})
	return []string{"--microvm", "on", "--vm-root", root}
}

// cli runs the stasis CLI against d and returns its standard output.
func (d *daemon) cli(args ...string) string {
	d.t.Helper()
	cmd := exec.Command(stasisCLI.path(d.t), append([]string{"--socket", d.socket, "--data", d.data}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		d.t.Fatalf("stasis %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// vmCounter runs "/counter await CMD" in a micro-VM actor, through the API
// (the guest agent runs it).
func (d *daemon) vmCounter(id, cmd string) string {
	d.t.Helper()
	res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: id, Args: []string{"/counter", "await", cmd}})
	if err != nil || res.ExitCode != 0 {
		d.t.Fatalf("counter %s in %s: %v %+v", cmd, id, err, res)
	}
	return strings.TrimSpace(res.Stdout)
}

// standIns counts the stand-in devices the guest of actor id lists: the
// virtio-serial controllers (PCI device 1af4:1003) beyond the agent's.
func (d *daemon) standIns(id string) int {
	d.t.Helper()
	res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: id, Args: []string{"/bin/sh", "-c", "cat /sys/bus/pci/devices/*/device"}})
	if err != nil || res.ExitCode != 0 {
		d.t.Fatalf("list the PCI devices of %s: %v %+v", id, err, res)
	}
	return strings.Count(res.Stdout, "0x1003") - 1
}

// vmTemplate records a micro-VM counter template through the CLI, with
// extra flags of template create.
func (d *daemon) vmTemplate(name string, extra ...string) api.Template {
	d.t.Helper()
	kernel, initrd := vmtest.Guest(d.t)
	var t api.Template
	args := []string{"template", "create", name, "--json", "--runtime", "microvm", "--kernel", kernel, "--initramfs", initrd, "--memory", "192MiB",
		"--vm-device", "serial1=virtio-serial-pci", "--probe-cmd", "/counter,await,get"}
	out := d.cli(append(append(args, extra...), "--", "/counter", "serve")...)
	if err := json.Unmarshal([]byte(out), &t); err != nil || t.Runtime != api.RuntimeMicroVM || t.VM == nil || len(t.VM.Devices) != 1 {
		d.t.Fatalf("template create: %v\n%s", err, out)
	}
	return t
}

// TestMicroVMActors: a micro-VM actor's whole lifecycle through the CLI on
// a stasisd that runs a gVisor actor beside it (ids a1 and a10): run,
// exec, pause (kept: the VM frozen in memory), resume, suspend into the
// store, resume, a damaged local copy fetched again, delete; the node's
// facts and the snapshot's guest; a golden snapshot that starts two more.
func TestMicroVMActors(t *testing.T) {
	d := vmDaemon(t)
	d.start("")
	var info fingerprint.Fingerprint
	if err := json.Unmarshal([]byte(d.cli("node", "info", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if !info.Offers(api.RuntimeMicroVM) || len(info.Runtimes) != 1 || !strings.HasPrefix(info.Runtimes[0].Runtime.Version, "QEMU emulator version") || len(info.Runtimes[0].Notes) != 2 {
		t.Fatalf("node info's runtimes: %+v", info.Runtimes)
	}
	if text := d.cli("node", "info"); !strings.Contains(text, "microvm:") || !strings.Contains(text, "guest agent over virtio-serial") {
		t.Fatalf("node info says nothing of micro-VMs:\n%s", text)
	}
	d.template("counter", nil)
	d.vmTemplate("vm")
	d.run("counter", "a1")
	var a api.Actor
	if err := json.Unmarshal([]byte(d.cli("actor", "run", "vm", "--id", "a10", "--json")), &a); err != nil || a.State != api.Running || a.Runtime != api.RuntimeMicroVM {
		t.Fatalf("actor run: %+v %v", a, err)
	}
	first := d.vmCounter("a10", "incr")
	inst, _, _ := strings.Cut(first, " ")
	d.counter("a1", "incr")
	if out := d.cli("actor", "exec", "a10", "--", "/counter", "await", "incr"); strings.TrimSpace(out) != inst+" 2" {
		t.Fatalf("actor exec: %q", out)
	}

	// A kept pause freezes the VM where it is; resume loads nothing.
	d.cli("actor", "pause", "a10")
	if st, err := d.api.InspectActor(context.Background(), "a10"); err != nil || st.State != api.Paused {
		t.Fatalf("after pause: %+v %v", st, err)
	}
	d.cli("actor", "resume", "a10")
	if got := d.vmCounter("a10", "incr"); got != inst+" 3" {
		t.Fatalf("after a kept pause the counter says %q, want %q", got, inst+" 3")
	}

	// Suspend: the VM is gone, its snapshot stored, with its guest.
	if err := json.Unmarshal([]byte(d.cli("actor", "suspend", "a10", "--json")), &a); err != nil || a.State != api.Suspended || a.Snapshot == nil || a.Snapshot.Stored == "" {
		t.Fatalf("suspend: %+v %v", a, err)
	}
	m := readManifest(t, a.Snapshot.Dir)
	if g := m.Guest; g == nil || g.Machine != "pc" || g.MemoryBytes != 192<<20 || g.Kernel == "" || !strings.HasPrefix(g.VMM, "QEMU") || m.Runtime.Name != "qemu-microvm" {
		t.Fatalf("the snapshot's guest and runtime: %+v %+v", m.Guest, m.Runtime)
	}
	d.cli("actor", "resume", "a10")
	if got := d.vmCounter("a10", "incr"); got != inst+" 4" {
		t.Fatalf("after suspend and resume the counter says %q, want %q", got, inst+" 4")
	}

	// A damaged migration stream on this node is refused before any VM
	// runs on it, and the stored copy is fetched instead.
	a = d.op("Suspend", "a10")
	flipByte(t, filepath.Join(a.Snapshot.Dir, "image", "vm.state"))
	d.cli("actor", "resume", "a10")
	if got := d.vmCounter("a10", "incr"); got != inst+" 5" {
		t.Fatalf("after a resume past a damaged copy the counter says %q, want %q", got, inst+" 5")
	}
	if !historySays(t, d, "a10", "cannot be used") {
		t.Fatal("the history does not say the damaged copy was not used")
	}
	// The gVisor actor ran on untouched.
	if got := d.counter("a1", "incr"); !strings.HasSuffix(got, " 2") {
		t.Fatalf("the gVisor actor's counter: %q", got)
	}
	if ls := d.cli("template", "ls"); !strings.Contains(ls, "microvm") {
		t.Fatalf("template ls shows no runtime:\n%s", ls)
	}
	d.cli("actor", "rm", "a10")
	d.cli("actor", "rm", "a1")

	// A golden snapshot of the micro-VM template: new actors start from
	// it, each in a VM of its own.
	d.cli("template", "warm", "vm")
	for _, id := range []string{"g1", "g2"} {
		if err := json.Unmarshal([]byte(d.cli("actor", "run", "vm", "--id", id, "--json")), &a); err != nil || a.State != api.Running || !strings.Contains(a.Reason, "golden") {
			t.Fatalf("actor run from the golden snapshot: %+v %v", a, err)
		}
		d.vmCounter(id, "incr")
	}
	g1, _, _ := strings.Cut(d.vmCounter("g1", "get"), " ")
	g2, _, _ := strings.Cut(d.vmCounter("g2", "get"), " ")
	if g1 != g2 || d.vmCounter("g1", "get") != g1+" 1" || d.vmCounter("g2", "get") != g2+" 1" {
		t.Fatalf("two actors from one golden snapshot: the same process (%s, %s), each with its own count", g1, g2)
	}
}

// TestMicroVMExits: a micro-VM actor whose workload exits is seen EXITED
// with its exit code while its guest runs on (the agent is its init), its
// VM stopped with it, and its template's restart policy boots it again: a
// new workload, counting from 0.
func TestMicroVMExits(t *testing.T) {
	d := vmDaemon(t)
	d.start("")
	d.vmTemplate("vm", "--restart", "on-failure")
	d.cli("actor", "run", "vm", "--id", "v1")
	first := d.vmCounter("v1", "incr")
	res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: "v1", Args: []string{"/counter", "exit", "3"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("ask v1's workload to exit 3: %v %+v", err, res)
	}
	var a api.Actor
	waitForLong(t, "v1 to be restarted after its exit", 3*time.Minute, func() bool {
		a = d.inspect("v1")
		return a.State == api.Running && a.Operation == nil && strings.Contains(a.Reason, "restarted by its restart policy (on-failure)")
	})
	if !strings.Contains(a.Reason, "exited with code 3") {
		t.Fatalf("restarted, its reason does not say how it ended: %+v", a)
	}
	second := d.vmCounter("v1", "get")
	if strings.Fields(second)[0] == strings.Fields(first)[0] || strings.Fields(second)[1] != "0" {
		t.Fatalf("after the restart the counter says %q (before: %q): want a new workload at 0", second, first)
	}
	if out := d.cli("actor", "events", "v1"); !strings.Contains(out, "exited with code 3") {
		t.Fatalf("v1's history does not say it exited:\n%s", out)
	}
}

// TestMicroVMCrashRecovery: stasisd killed (SIGKILL) in the middle of a
// micro-VM's suspend, after its device was detached, and in the middle of
// its resume, after the VM was restored: each restart settles the actor
// (running again with its device and its count, or suspended with its
// snapshot whole), and the actor goes on.
func TestMicroVMCrashRecovery(t *testing.T) {
	d := vmDaemon(t)
	d.start("")
	d.vmTemplate("vm")
	d.run("vm", "a1")
	inst, _, _ := strings.Cut(d.vmCounter("a1", "incr"), " ")
	d.stop()

	d.start(service.Failpoint(service.KindSuspend, engine.StepCheckpoint, false))
	go func() { _, _ = d.api.Suspend(context.Background(), api.OpRequest{ID: "a1"}) }()
	d.crashed()
	d.start("")
	if a := d.inspect("a1"); a.State != api.Running {
		t.Fatalf("after a crash before the checkpoint: %+v", a)
	}
	if got := d.vmCounter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("after a crash before the checkpoint the counter says %q, want %q", got, inst+" 2")
	}
	if n := d.standIns("a1"); n != 1 {
		t.Fatalf("after a crash with its device detached the guest lists %d stand-in devices, want 1 (attached again)", n)
	}
	d.op("Suspend", "a1")
	d.stop()

	d.start(service.Failpoint(service.KindResume, engine.StepRestore, true))
	go func() { _, _ = d.api.Resume(context.Background(), api.OpRequest{ID: "a1"}) }()
	d.crashed()
	d.start("")
	a := d.inspect("a1")
	if a.State == api.Suspended {
		a = d.op("Resume", "a1")
	}
	if a.State != api.Running {
		t.Fatalf("after a crash during the resume: %+v", a)
	}
	if got := d.vmCounter("a1", "incr"); got != inst+" 3" {
		t.Fatalf("after a crash during the resume the counter says %q, want %q", got, inst+" 3")
	}
	if n := d.standIns("a1"); n != 1 {
		t.Fatalf("after a crash during the resume the guest lists %d stand-in devices, want 1", n)
	}
}

func readManifest(t *testing.T, dir string) *snapshot.Manifest {
	t.Helper()
	m, err := snapshot.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// flipByte changes one bit of the byte in the middle of file.
func flipByte(t *testing.T, file string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, st.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// historySays tells whether an event of actor id's history says text.
func historySays(t *testing.T, d *daemon, id, text string) bool {
	t.Helper()
	events, err := d.api.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Events {
		if strings.Contains(e.Message, text) || strings.Contains(e.Error, text) {
			return true
		}
	}
	return false
}

// TestFleetMicroVM: a micro-VM ActorTemplate in the fleet. Its actor is
// placed only on nodes whose stasisd runs micro-VMs (node-c's does not,
// and the placement says why), moves to another with its count, and a
// drain moves it like any actor.
func TestFleetMicroVM(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	f.addNode("node-c", "--microvm", "off")
	kernel, initrd := vmtest.Guest(t)
	at := &stasisv1alpha1.ActorTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm"},
		Spec: stasisv1alpha1.ActorTemplateSpec{Runtime: api.RuntimeMicroVM, Args: []string{"/counter", "serve"}, MemoryBytes: 192 << 20,
			VM:    &stasisv1alpha1.VM{Kernel: kernel, Initramfs: initrd, Devices: []stasisv1alpha1.Device{{ID: "serial1", Driver: "virtio-serial-pci"}}},
			Probe: &stasisv1alpha1.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 60}}}
	if err := f.cp.kube.Create(ctx, at); err != nil {
		t.Fatal(err)
	}
	if err := f.cp.kube.Create(ctx, &stasisv1alpha1.Actor{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "v1"}, Spec: stasisv1alpha1.ActorSpec{Template: "vm"}}); err != nil {
		t.Fatal(err)
	}
	f.await("v1", "a reason why node-c cannot take it", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhasePending && strings.Contains(s.Reason, "node-c: runs no microvm actors (turned off on this node")
	})
	f.addNode("node-a", microVMFlags(t)...)
	f.addNode("node-b", microVMFlags(t)...)
	vmCount := func(name, verb string) string {
		t.Helper()
		n := f.nodes[f.actor(name).Status.Node]
		_, count, _ := strings.Cut(n.d.vmCounter(name, verb), " ")
		return count
	}
	s := f.await("v1", "running", running)
	if s.Node == "node-c" {
		t.Fatalf("v1 was placed on node-c, which runs no micro-VMs: %+v", s)
	}
	vmCount("v1", "incr")
	want := vmCount("v1", "incr")

	// Pinned to node-c: its snapshot cannot go there, and the status says
	// why; then a drain of its node moves it to the other micro-VM node.
	f.edit("v1", func(s *stasisv1alpha1.ActorSpec) { s.Phase = stasisv1alpha1.PhaseSuspended })
	f.await("v1", "suspended", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhaseSuspended && s.Snapshot != ""
	})
	f.edit("v1", func(s *stasisv1alpha1.ActorSpec) { s.Phase, s.Node = stasisv1alpha1.PhaseRunning, "node-c" })
	f.await("v1", "a reason why node-c cannot restore it", func(s stasisv1alpha1.ActorStatus) bool {
		return s.Phase == stasisv1alpha1.PhasePending && strings.Contains(s.Reason, "node-c: runtime qemu-microvm needed")
	})
	f.edit("v1", func(s *stasisv1alpha1.ActorSpec) { s.Node = "" })
	s = f.await("v1", "running again", running)
	if got := vmCount("v1", "get"); got != want {
		t.Fatalf("v1's counter after its suspend and resume on %s: %s, want %s", s.Node, got, want)
	}
	other := map[string]string{"node-a": "node-b", "node-b": "node-a"}[s.Node]
	f.drain(s.Node, true)
	s = f.await("v1", "running on "+other, func(s stasisv1alpha1.ActorStatus) bool { return running(s) && s.Node == other })
	if got := vmCount("v1", "get"); got != want {
		t.Fatalf("v1's counter after the drain to %s: %s, want %s", s.Node, got, want)
	}
}

// TestMicroVMFullDisk: a VM suspend whose migration stream meets a full
// disk (the snapshots folder a 64 MiB tmpfs: enough for the preflight,
// which counts the guest's memory in use, not for the stream) fails with
// the cause and leaves the actor running, its device attached again, its
// count going on, and no half-written snapshot.
func TestMicroVMFullDisk(t *testing.T) {
	d := vmDaemon(t, "--no-store")
	snapshots := filepath.Join(d.data, "snapshots")
	if err := os.MkdirAll(snapshots, 0o700); err != nil {
		t.Fatal(err)
	}
	testdisk.Tmpfs(t, snapshots, "64m")
	d.start("")
	d.vmTemplate("vm")
	d.run("vm", "a1")
	inst, _, _ := strings.Cut(d.vmCounter("a1", "incr"), " ")
	_, err := d.api.Suspend(context.Background(), api.OpRequest{ID: "a1"})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "no space left on device") {
		t.Fatalf("suspend onto a full disk: %v, want it refused with the cause", err)
	}
	if a := d.inspect("a1"); a.State != api.Running || a.Snapshot != nil {
		t.Fatalf("after a suspend that met a full disk: %+v", a)
	}
	if got := d.vmCounter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("after a suspend that met a full disk the counter says %q, want %q", got, inst+" 2")
	}
	if n := d.standIns("a1"); n != 1 {
		t.Fatalf("after a suspend that met a full disk the guest lists %d stand-in devices, want 1", n)
	}
	if left, _ := os.ReadDir(snapshots); len(left) != 0 {
		t.Fatalf("the failed suspend left %d entries in %s", len(left), snapshots)
	}
}

// TestStoppedMicroVMIsRefused: a micro-VM actor whose QEMU is stopped
// (SIGSTOP, as a user or a debugger leaves it) answers neither its monitor
// nor its guest agent, and a suspend would wait on it up to its deadline
// (an hour), the actor held in SUSPENDING. Suspend, pause and exec each
// fail within seconds, saying so and how to let it run; the actor stays
// RUNNING with no operation under way, and once QEMU runs again it
// suspends and resumes with its memory.
func TestStoppedMicroVMIsRefused(t *testing.T) {
	d := vmDaemon(t)
	d.start("")
	d.vmTemplate("vm")
	d.run("vm", "a1")
	inst, _, _ := strings.Cut(d.vmCounter("a1", "incr"), " ")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	qemu := pidMatching(func(cmdline string) bool {
		return strings.Contains(cmdline, "qemu") && strings.Contains(cmdline, "/"+api.SandboxID("a1")+"/")
	})
	if qemu == 0 {
		t.Fatal("no QEMU process of actor a1 found")
	}
	if err := syscall.Kill(qemu, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = syscall.Kill(qemu, syscall.SIGCONT)
		}
	})
	mend := fmt.Sprintf("kill -CONT %d", qemu)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"suspend", func() error { _, err := d.api.Suspend(ctx, api.OpRequest{ID: "a1"}); return err }},
		{"pause", func() error { _, err := d.api.Pause(ctx, api.OpRequest{ID: "a1"}); return err }},
		{"exec", func() error {
			_, err := d.api.Exec(ctx, api.ExecRequest{ID: "a1", Args: []string{"/counter", "get"}})
			return err
		}},
	} {
		start := time.Now()
		err := c.call()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), mend) {
			t.Fatalf("%s of an actor whose QEMU is stopped: %v; want a failed precondition that says %q", c.name, err, mend)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the refused %s took %s", c.name, took)
		}
		if a := d.inspect("a1"); a.State != api.Running || a.Operation != nil {
			t.Fatalf("after the refused %s: %+v", c.name, a)
		}
	}
	stopped = false
	if err := syscall.Kill(qemu, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d.op("Suspend", "a1")
	d.op("Resume", "a1")
	if got := d.vmCounter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the suspend and resume", got)
	}
	if n := d.standIns("a1"); n != 1 {
		t.Fatalf("after the suspend and resume the guest lists %d stand-in devices, want 1", n)
	}
}
