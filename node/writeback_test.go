package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writebackDir(t *testing.T, bgRatio, bgBytes, ratio, bytes string) string {
	dir := t.TempDir()
	for name, v := range map[string]string{"dirty_background_ratio": bgRatio, "dirty_background_bytes": bgBytes, "dirty_ratio": ratio, "dirty_bytes": bytes} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadWriteback(t *testing.T) {
	const available = 100 << 30
	w, err := ReadWriteback(writebackDir(t, "10", "0", "20", "0"))
	if err != nil || w != (Writeback{BackgroundRatio: 10, Ratio: 20}) {
		t.Fatalf("the kernel's defaults: %+v %v", w, err)
	}
	if got := w.Background(available); got != 10<<30 {
		t.Errorf("10%% of 100 GiB: %d", got)
	}
	if d := w.Describe(available); !strings.Contains(d, "10.0 GiB") || !strings.Contains(d, "vm.dirty_background_ratio 10%") {
		t.Errorf("described as %q", d)
	}
	w, err = ReadWriteback(writebackDir(t, "0", "42949672960", "0", "85899345920"))
	if err != nil || w.Background(available) != 40<<30 {
		t.Fatalf("set in bytes: %+v %d %v", w, w.Background(available), err)
	}
	if d := w.Describe(available); !strings.Contains(d, "40.0 GiB") || !strings.Contains(d, "vm.dirty_background_bytes") {
		t.Errorf("described as %q", d)
	}
	if _, err := ReadWriteback(t.TempDir()); err == nil {
		t.Error("settings read from an empty folder")
	}
	if _, err := ReadWriteback(writebackDir(t, "ten", "0", "20", "0")); err == nil || !strings.Contains(err.Error(), `"ten"`) {
		t.Errorf("a setting that is not a count: %v", err)
	}
}
