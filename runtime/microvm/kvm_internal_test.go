package microvm

import (
	"os"
	"testing"
	"time"
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
