package compose

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime/microvm"
)

// MicroVMOptions set up the micro-VM runtime stasisd runs beside gVisor.
type MicroVMOptions struct {
	// Mode is auto (run micro-VMs when QEMU is installed), on (refuse to
	// start without) or off.
	Mode string
	QEMU string
	// Accel is kvm, tcg, or auto (KVM when it boots a guest here).
	Accel string
	// Root is the VMs' state folder (sockets, pid files); short, since
	// unix socket paths are.
	Root string
	// ProbeKernel is the guest kernel the choice of accelerator boots once
	// under KVM.
	ProbeKernel string
}

// DefaultGuestDir is where scripts/install-microvm.sh puts a guest kernel.
const DefaultGuestDir = "/usr/local/share/stasis/microvm"

// RegisterMicroVM adds the micro-VM runtime's flags.
func (m *MicroVMOptions) RegisterMicroVM(fs *pflag.FlagSet) {
	fs.StringVar(&m.Mode, "microvm", "auto", "micro-VM actors (templates with runtime microvm, docs/microvm.md): auto (when QEMU is installed), on (refuse to start without QEMU) or off")
	fs.StringVar(&m.QEMU, "qemu", "", "qemu-system-x86_64 binary for micro-VM actors (default: on PATH)")
	fs.StringVar(&m.Accel, "vm-accel", "auto", "micro-VM accelerator: auto (KVM when /dev/kvm boots a guest here, TCG otherwise), kvm or tcg")
	fs.StringVar(&m.Root, "vm-root", "", "micro-VMs' state folder: QMP and agent sockets, pid files (default: /run/stasis-vm/ and a hash of the data folder)")
	fs.StringVar(&m.ProbeKernel, "vm-probe-kernel", "", "a guest kernel booted once under KVM to check it runs guests (default: "+DefaultGuestDir+"/vmlinuz when present)")
}

// vmRoot is the VMs' state folder: under /run, named by the data folder,
// so that two stasisd of one host keep theirs apart in paths short enough
// for unix sockets.
func (m MicroVMOptions) vmRoot(dataDir string) string {
	if m.Root != "" {
		return m.Root
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return filepath.Join("/run/stasis-vm", hex.EncodeToString(sum[:6]))
}

// MicroVMEngine is the engine micro-VM actors run on, or nil with the
// reason when there is none (off, or auto without QEMU). With on, a
// runtime that cannot start is an error.
func (o Options) MicroVMEngine(ctx context.Context, m MicroVMOptions) (*engine.Engine, string, error) {
	switch m.Mode {
	case "off":
		return nil, "turned off on this node (stasisd --microvm=off)", nil
	case "auto", "on":
	default:
		return nil, "", fmt.Errorf("--microvm %q: want auto, on or off", m.Mode)
	}
	cfg := microvm.Config{QEMU: m.QEMU, Root: m.vmRoot(o.DataDir), ProbeKernel: m.ProbeKernel}
	switch m.Accel {
	case "auto", "":
	case "kvm", "tcg":
		cfg.Accel = m.Accel
	default:
		return nil, "", fmt.Errorf("--vm-accel %q: want auto, kvm or tcg", m.Accel)
	}
	if cfg.ProbeKernel == "" {
		if k := filepath.Join(DefaultGuestDir, "vmlinuz"); fileExists(k) {
			cfg.ProbeKernel = k
		}
	}
	if m.Mode == "auto" {
		bin := m.QEMU
		if bin == "" {
			bin = "qemu-system-x86_64"
		}
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Sprintf("QEMU is not installed here (%s not found: scripts/install-microvm.sh installs it)", bin), nil
		}
	}
	rt, err := microvm.New(ctx, cfg)
	if err != nil {
		if m.Mode == "on" {
			return nil, "", fmt.Errorf("--microvm=on: %w", err)
		}
		return nil, err.Error(), nil
	}
	policy, err := o.Policy()
	if err != nil {
		return nil, "", err
	}
	// No GPU source: a VM's GPU belongs to its guest, whose agent reports
	// it; the host's NVML does not see a device bound to vfio-pci.
	return &engine.Engine{Runtime: rt, Policy: policy}, "", nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
