package cuda

import (
	"testing"
	"unsafe"
)

// The driver reads exactly 64 bytes through each args pointer.
func TestArgStructSizes(t *testing.T) {
	for name, size := range map[string]uintptr{
		"CUcheckpointLockArgs":       unsafe.Sizeof(lockArgs{}),
		"CUcheckpointCheckpointArgs": unsafe.Sizeof(checkpointArgs{}),
		"CUcheckpointRestoreArgs":    unsafe.Sizeof(restoreArgs{}),
		"CUcheckpointUnlockArgs":     unsafe.Sizeof(unlockArgs{}),
	} {
		if size != 64 {
			t.Errorf("%s is %d bytes, want 64", name, size)
		}
	}
	if s := unsafe.Sizeof(gpuPair{}); s != 32 {
		t.Errorf("CUcheckpointGpuPair is %d bytes, want 32", s)
	}
	if o := unsafe.Offsetof(restoreArgs{}.gpuPairsCount); o != 8 {
		t.Errorf("gpuPairsCount at offset %d, want 8", o)
	}
}
