package service_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// vmEnv is a service whose micro-VM runtime is a second fake, named apart
// from the first, so that each call can be told by the runtime it reached.
func vmEnv(t *testing.T) (*env, *runtimetest.Runtime) {
	vm := runtimetest.New()
	vm.Name = "fake-vm"
	e := newEnv(t, func(c *service.Config) { c.MicroVM = &engine.Engine{Runtime: vm} })
	return e, vm
}

// guestFiles writes a stand-in kernel and initramfs under the host folder.
func (e *env) guestFiles() (kernel, initramfs string) {
	e.t.Helper()
	kernel, initramfs = filepath.Join(e.host, "vmlinuz"), filepath.Join(e.host, "initrd.img")
	for _, f := range []string{kernel, initramfs} {
		if err := os.WriteFile(f, []byte("guest"), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	return kernel, initramfs
}

// TestActorsOfBothRuntimes: one service runs gVisor and micro-VM actors
// side by side, each through its own runtime, named so that one id begins
// the other's; every operation and a restart reach the right runtime.
func TestActorsOfBothRuntimes(t *testing.T) {
	ctx := context.Background()
	e, vm := vmEnv(t)
	kernel, initramfs := e.guestFiles()
	e.template("t", nil)
	got, err := e.svc.CreateTemplate(ctx, api.Template{Name: "v", Runtime: api.RuntimeMicroVM, Args: []string{"/counter", "serve"}, MemoryBytes: 128 << 20,
		VM: &api.VM{Kernel: kernel, Initramfs: initramfs, CPUs: 2, Devices: []api.Device{{ID: "rng0", Driver: "virtio-rng-pci"}}}, Probe: api.Probe{Command: []string{"true"}}})
	if err != nil || got.Runtime != api.RuntimeMicroVM {
		t.Fatalf("micro-VM template: %+v %v", got, err)
	}
	// No memory given: shown as the guest gets it.
	dflt, err := e.svc.CreateTemplate(ctx, api.Template{Name: "v256", Runtime: api.RuntimeMicroVM, Args: []string{"/counter", "serve"},
		VM: &api.VM{Kernel: kernel, Initramfs: initramfs}, Probe: api.Probe{Command: []string{"true"}}})
	if err != nil || dflt.MemoryBytes != 256<<20 {
		t.Fatalf("a micro-VM template without memory: %d bytes, %v; want 256 MiB", dflt.MemoryBytes, err)
	}
	if tmpl, _ := e.svc.Template(ctx, "t"); tmpl.Runtime != api.RuntimeGVisor {
		t.Fatalf("a template naming no runtime is gVisor's, got %q", tmpl.Runtime)
	}
	a1 := e.run("a1")
	a10, err := e.svc.Run(ctx, api.RunRequest{Template: "v", ID: "a10"})
	if err != nil || a10.State != api.Running || a10.Runtime != api.RuntimeMicroVM || a1.Runtime != api.RuntimeGVisor {
		t.Fatalf("run: %+v %+v %v", a1, a10, err)
	}
	_, gvHasVM := e.rt.Sandbox(a10.Sandbox)
	_, vmHasGV := vm.Sandbox(a1.Sandbox)
	vmSandbox, vmHasVM := vm.Sandbox(a10.Sandbox)
	if gvHasVM || vmHasGV || !vmHasVM {
		t.Fatal("an actor's sandbox is in the other runtime")
	}
	// The guest as the template gave it: kernel, initramfs, memory, CPUs
	// and devices in the actor's bundle.
	spec := readSpec(t, vmSandbox.Bundle)
	if spec.VM == nil || spec.VM.Kernel.Path != kernel || spec.VM.Kernel.InitRD != initramfs || *spec.Linux.Resources.Memory.Limit != 128<<20 ||
		!strings.Contains(spec.Annotations["org.stasis.microvm.devices"], "virtio-rng-pci") || spec.Annotations["org.stasis.microvm.cpus"] != "2" {
		t.Fatalf("the micro-VM actor's bundle: %+v", spec)
	}
	e.counter("a1", "incr")
	for range 3 {
		e.counter("a10", "incr")
	}
	for _, id := range []string{"a1", "a10"} {
		if a, err := e.svc.Suspend(ctx, api.OpRequest{ID: id}); err != nil || a.State != api.Suspended {
			t.Fatalf("suspend %s: %+v %v", id, a, err)
		}
	}
	if vm.Calls["Checkpoint"] != 1 || e.rt.Calls["Checkpoint"] != 1 {
		t.Fatalf("checkpoints: gVisor %d, micro-VM %d; want one each", e.rt.Calls["Checkpoint"], vm.Calls["Checkpoint"])
	}
	e.restart()
	for _, id := range []string{"a1", "a10"} {
		if a, err := e.svc.Resume(ctx, api.OpRequest{ID: id}); err != nil || a.State != api.Running {
			t.Fatalf("resume %s: %+v %v", id, a, err)
		}
	}
	if v := e.counter("a10", "get"); !strings.HasSuffix(v, " 3") {
		t.Fatalf("the micro-VM actor's counter after its resume: %q, want 3", v)
	}
	if v := e.counter("a1", "get"); !strings.HasSuffix(v, " 1") {
		t.Fatalf("the gVisor actor's counter after its resume: %q, want 1", v)
	}
	info, err := e.svc.NodeInfo(ctx)
	if err == nil || !strings.Contains(err.Error(), "fingerprint reader") {
		// The env gives no fingerprint reader; with one, NodeInfo lists
		// the micro-VM runtime (TestMicroVMAbsent).
		t.Fatalf("node info: %+v %v", info, err)
	}

	// A stasisd started without micro-VMs leaves their actors as they
	// are and says why at each call; its gVisor actors run on.
	e.cfg.MicroVM, e.cfg.MicroVMUnavailable = nil, "turned off on this node (stasisd --microvm=off)"
	e.restart()
	if a := e.actor("a10"); a.State != api.Running {
		t.Fatalf("the micro-VM actor after a start without micro-VMs: %+v", a)
	}
	_, err = e.svc.Exec(ctx, api.ExecRequest{ID: "a10", Args: []string{"/counter", "await", "get"}})
	if code(err) != "failed_precondition" || !strings.Contains(err.Error(), "--microvm=off") {
		t.Fatalf("exec in a micro-VM actor without micro-VMs: %v (%s)", err, code(err))
	}
	e.counter("a1", "incr")
	if _, ok := vm.Sandbox(a10.Sandbox); !ok {
		t.Fatal("the micro-VM actor's VM was removed by a stasisd that does not run micro-VMs")
	}
}

// TestMicroVMTemplateRefusals: what a micro-VM template may not ask for is
// refused with the reason, and nothing is recorded.
func TestMicroVMTemplateRefusals(t *testing.T) {
	ctx := context.Background()
	e, _ := vmEnv(t)
	kernel, initramfs := e.guestFiles()
	outside := filepath.Join(t.TempDir(), "vmlinuz")
	if err := os.WriteFile(outside, []byte("guest"), 0o644); err != nil {
		t.Fatal(err)
	}
	guest := func() *api.VM { return &api.VM{Kernel: kernel, Initramfs: initramfs} }
	vmTemplate := func(tweak func(*api.Template)) api.Template {
		t := api.Template{Name: "v", Runtime: api.RuntimeMicroVM, Args: []string{"/counter", "serve"}, VM: guest()}
		tweak(&t)
		return t
	}
	for _, c := range []struct {
		name, code, says string
		t                api.Template
	}{
		{"unknown runtime", "invalid_argument", `runtime "kata"`, vmTemplate(func(t *api.Template) { t.Runtime = "kata" })},
		{"a rootfs", "invalid_argument", "not a rootfs", vmTemplate(func(t *api.Template) { t.Rootfs = e.host })},
		{"durable folders", "invalid_argument", "durable", vmTemplate(func(t *api.Template) { t.Durable = []string{"/data"} })},
		{"no guest", "invalid_argument", "no guest", vmTemplate(func(t *api.Template) { t.VM = nil })},
		{"no args", "invalid_argument", "no args", vmTemplate(func(t *api.Template) { t.Args = nil })},
		{"odd memory", "invalid_argument", "whole MiB", vmTemplate(func(t *api.Template) { t.MemoryBytes = 100<<20 + 1 })},
		{"a relative kernel", "invalid_argument", "absolute", vmTemplate(func(t *api.Template) { t.VM.Kernel = "vmlinuz" })},
		{"a kernel outside the host paths", "permission_denied", outside, vmTemplate(func(t *api.Template) { t.VM.Kernel = outside })},
		{"a network device", "permission_denied", "virtio-net-pci", vmTemplate(func(t *api.Template) {
			t.VM.Devices = []api.Device{{ID: "net0", Driver: "virtio-net-pci"}}
		})},
		{"a device property", "permission_denied", "netdev", vmTemplate(func(t *api.Template) {
			t.VM.Devices = []api.Device{{ID: "gpu0", Driver: "vfio-pci", Props: map[string]string{"netdev": "x"}}}
		})},
		{"a GPU without an address", "invalid_argument", "props.host", vmTemplate(func(t *api.Template) {
			t.VM.Devices = []api.Device{{ID: "gpu0", Driver: "vfio-pci"}}
		})},
		{"GPUs without devices", "invalid_argument", "passed through as a device", vmTemplate(func(t *api.Template) { t.GPUs = 1 })},
		{"a vm section on gVisor", "invalid_argument", "for micro-VM templates", vmTemplate(func(t *api.Template) { t.Runtime = ""; t.Rootfs = e.host })},
		{"a bundle without a vm section", "invalid_argument", "no vm section", vmTemplate(func(t *api.Template) { t.VM, t.Args, t.Bundle = nil, nil, e.bundle(nil) })},
		{"a bundle's kernel outside the host paths", "permission_denied", outside, vmTemplate(func(t *api.Template) {
			t.VM, t.Args = nil, nil
			t.Bundle = e.bundle(func(s *specs.Spec) { s.VM = &specs.VM{Kernel: specs.VMKernel{Path: outside, InitRD: initramfs}} })
		})},
	} {
		_, err := e.svc.CreateTemplate(ctx, c.t)
		if code(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v (%s), want %s naming %q", c.name, err, code(err), c.code, c.says)
		}
	}
	if list, err := e.svc.Templates(ctx); err != nil || len(list) != 0 {
		t.Fatalf("refused templates were recorded: %+v %v", list, err)
	}
	// A GPU passed through, and a bundle whose guest is named from its
	// folder, are taken.
	if _, err := e.svc.CreateTemplate(ctx, vmTemplate(func(t *api.Template) {
		t.GPUs, t.VM.Devices = 1, []api.Device{{ID: "gpu0", Driver: "vfio-pci", Props: map[string]string{"host": "0000:3b:00.0"}}}
	})); err != nil {
		t.Fatalf("a GPU template: %v", err)
	}
	b := e.bundle(func(s *specs.Spec) {
		s.Root = nil
		s.VM = &specs.VM{Kernel: specs.VMKernel{Path: "vmlinuz", InitRD: "initrd.img"}}
	})
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(b, f), []byte("guest"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.svc.CreateTemplate(ctx, api.Template{Name: "b", Runtime: api.RuntimeMicroVM, Bundle: b}); err != nil {
		t.Fatalf("a micro-VM bundle: %v", err)
	}
}

// TestMicroVMAbsent: without a micro-VM runtime, a micro-VM template is
// refused with why and the fix, and the node's facts say the same.
func TestMicroVMAbsent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, func(c *service.Config) {
		c.MicroVMUnavailable = "QEMU is not installed here"
		c.Node = (&engine.Engine{Runtime: runtimetest.New()}).Fingerprint
	})
	kernel, initramfs := e.guestFiles()
	_, err := e.svc.CreateTemplate(ctx, api.Template{Name: "v", Runtime: api.RuntimeMicroVM, Args: []string{"/counter"}, VM: &api.VM{Kernel: kernel, Initramfs: initramfs}})
	if code(err) != "failed_precondition" || !strings.Contains(err.Error(), "QEMU is not installed here") {
		t.Fatalf("a micro-VM template without micro-VMs: %v (%s)", err, code(err))
	}
	info, err := e.svc.NodeInfo(ctx)
	if err != nil || len(info.Runtimes) != 1 || info.Runtimes[0].Name != api.RuntimeMicroVM || info.Runtimes[0].Available || info.Runtimes[0].Reason != "QEMU is not installed here" {
		t.Fatalf("node info: %+v %v", info.Runtimes, err)
	}
	if info.Offers(api.RuntimeMicroVM) {
		t.Fatalf("the node offers micro-VMs: %+v", info.Runtimes)
	}
}

func readSpec(t *testing.T, bundleDir string) *specs.Spec {
	t.Helper()
	spec, err := bundle.Load(bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}
