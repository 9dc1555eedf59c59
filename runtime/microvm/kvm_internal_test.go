package microvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestProbeKVM runs the KVM probe on this host: it must answer within its
// timeout either way, and where it says KVM works a guest's first
// instructions ran.
func TestProbeKVM(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		if err := probeKVM(time.Second); err == nil {
			t.Fatal("the probe says KVM works on a host without /dev/kvm")
		}
		return
	}
	start := time.Now()
	err := probeKVM(2 * time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the probe took %s", took)
	}
	t.Logf("KVM on this host: %v", err)
}

// TestProbeBootGuestDiesWithItsProber: a process killed while it probes a
// boot under KVM (stasisd killed as it starts) takes the probe's QEMU with
// it. The stand-in QEMU writes its pid and never prints a kernel line.
func TestProbeBootGuestDiesWithItsProber(t *testing.T) {
	if dir := os.Getenv("STASIS_PROBE_PARENT"); dir != "" {
		// The prober: it probes until it is killed.
		_ = probeBoot(context.Background(), filepath.Join(dir, "qemu"), "vmlinuz", time.Hour)
		return
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "qemu.pid")
	script := "#!/bin/sh\necho $$ >" + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + "\nexec sleep 3600\n"
	if err := os.WriteFile(filepath.Join(dir, "qemu"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prober := exec.Command(os.Args[0], "-test.run", "^TestProbeBootGuestDiesWithItsProber$")
	prober.Env = append(os.Environ(), "STASIS_PROBE_PARENT="+dir)
	if err := prober.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(30 * time.Second); ; {
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(data))); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			_ = prober.Process.Kill()
			t.Fatal("the stand-in QEMU did not start within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := prober.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = prober.Wait()
	// The stand-in is reparented and reaped by init once it dies; until
	// then its /proc entry says it is a zombie or gone.
	for deadline := time.Now().Add(10 * time.Second); ; {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			_ = unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("the probe's QEMU (pid %d) outlived its prober by 10 s", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
