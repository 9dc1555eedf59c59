// Package vmtest builds what the micro-VM integration tests boot: an
// initramfs holding the guest agent, busybox, the guest kernel's virtio
// modules and the test actor's binaries (the counter, memholder, and the
// stand-in stasis-cuda at bundle.HelperPath), over the kernel that
// scripts/install-microvm.sh installs; and OCI bundles for it.
package vmtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/runtime/microvm/initramfs"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// Dir is where scripts/install-microvm.sh puts the guest kernel, modules
// and busybox; STASIS_MICROVM_DIR overrides it.
func Dir() string {
	if d := os.Getenv("STASIS_MICROVM_DIR"); d != "" {
		return d
	}
	return "/usr/local/share/stasis/microvm"
}

var guest struct {
	once           sync.Once
	work           string
	kernel, initrd string
	err            error
}

// RemoveGuest removes the initramfs and agent Guest built (a TestMain
// passes it to testactor.Main).
func RemoveGuest() {
	if guest.work != "" {
		os.RemoveAll(guest.work)
	}
}

// Guest returns the guest kernel and an initramfs built once per test
// binary.
func Guest(t testing.TB) (kernel, initrd string) {
	t.Helper()
	dir := Dir()
	if _, err := os.Stat(filepath.Join(dir, "modules.load")); err != nil {
		t.Fatalf("no micro-VM guest parts in %s (install them with scripts/install-microvm.sh): %v", dir, err)
	}
	counter, helper := testactor.Binaries(t)
	memholder := testactor.Memholder(t)
	guest.once.Do(func() {
		guest.kernel = filepath.Join(dir, "vmlinuz")
		work, err := os.MkdirTemp("", "stasis-vmtest-")
		if err != nil {
			guest.err = err
			return
		}
		guest.work = work
		agentBin := filepath.Join(work, "stasis-agent")
		cmd := exec.Command("go", "build", "-o", agentBin, "github.com/stasis-run/stasis/cmd/stasis-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guest.err = &buildError{string(out), err}
			return
		}
		list, err := os.ReadFile(filepath.Join(dir, "modules.load"))
		if err != nil {
			guest.err = err
			return
		}
		g := initramfs.Guest{
			Agent:      agentBin,
			Busybox:    filepath.Join(dir, "busybox"),
			ModulesDir: filepath.Join(dir, "modules"),
			Modules:    strings.Fields(string(list)),
			Files:      map[string]string{"counter": counter, "memholder": memholder, bundle.HelperPath: helper},
		}
		guest.initrd = filepath.Join(work, "initrd.img")
		f, err := os.Create(guest.initrd)
		if err != nil {
			guest.err = err
			return
		}
		if err := initramfs.Write(f, g); err != nil {
			guest.err = err
		}
		if err := f.Close(); guest.err == nil {
			guest.err = err
		}
	})
	if guest.err != nil {
		t.Fatalf("build the micro-VM guest: %v", guest.err)
	}
	return guest.kernel, guest.initrd
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "build stasis-agent: " + e.err.Error() + "\n" + e.out }

// Options shape a test VM's bundle.
type Options struct {
	// Devices are the PCI devices the VM gets.
	Devices []microvm.Device
	// MemoryMiB is the guest's memory; 192 MiB when zero.
	MemoryMiB int64
	// Cmdline is added to the kernel command line.
	Cmdline string
	// Ballast, when set, runs memholder with these arguments (TEMPLATE_MIB
	// OWN_MIB ZERO_MIB SEED) instead of the plain counter; it answers the
	// same "counter await get".
	Ballast []string
}

// Bundle writes an OCI bundle in dir for a VM whose workload is the
// counter ("counter serve"; "counter await get" asks it).
func Bundle(t testing.TB, dir string, opts Options) string {
	t.Helper()
	kernel, initrd := Guest(t)
	mem := opts.MemoryMiB
	if mem == 0 {
		mem = 192
	}
	mem <<= 20
	args := []string{"/counter", "serve"}
	if opts.Ballast != nil {
		args = append([]string{"/memholder"}, opts.Ballast...)
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: args, Cwd: "/", Env: []string{"PATH=/bin"}},
		VM:      &specs.VM{Kernel: specs.VMKernel{Path: kernel, InitRD: initrd}},
		Linux:   &specs.Linux{Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}}},
	}
	if opts.Cmdline != "" {
		spec.VM.Kernel.Parameters = strings.Fields(opts.Cmdline)
	}
	if len(opts.Devices) > 0 {
		devices, err := json.Marshal(opts.Devices)
		if err != nil {
			t.Fatal(err)
		}
		spec.Annotations = map[string]string{microvm.AnnotationDevices: string(devices)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}
