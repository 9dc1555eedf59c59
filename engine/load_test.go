package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemoryLoadAuto checks MemoryLoadAuto's choice: a GPU actor's image
// in the page cache loads eagerly when sandbox memory is in huge pages, and
// in the background when it is not, when the image is not in the page
// cache, or when the actor has no GPU state; a set way is kept.
func TestMemoryLoadAuto(t *testing.T) {
	hugeDir := t.TempDir()
	pages := func(shmem, defrag string) {
		os.WriteFile(filepath.Join(hugeDir, "shmem_enabled"), []byte("always within_size "+shmem+" deny force"), 0o644)
		os.WriteFile(filepath.Join(hugeDir, "defrag"), []byte("always "+defrag+" madvise never"), 0o644)
	}
	image := t.TempDir()
	pagesFile := filepath.Join(image, "pages.img")
	if err := os.WriteFile(pagesFile, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &Engine{HugePagesDir: hugeDir}
	check := func(gpu, wantBackground bool, want string) {
		t.Helper()
		background, msg := e.loadInBackground(image, gpu)
		if background != wantBackground || !strings.Contains(msg, want) {
			t.Errorf("%s, gpu %v: background %v %q; want %v, %q", e.MemoryLoad, gpu, background, msg, wantBackground, want)
		}
	}
	pages("[advise]", "[defer]")
	check(true, false, "100% of the image is in the page cache and sandbox memory is in huge pages")
	check(false, true, "no GPU state to restore")
	pages("[never]", "defer")
	check(true, true, "sandbox memory is in 4 KiB pages")
	os.Remove(filepath.Join(hugeDir, "defrag"))
	check(true, true, "sandbox memory is in 4 KiB pages")

	pages("[advise]", "[defer]")
	f, err := os.Open(pagesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	check(true, true, "of the image is in the page cache")

	e.MemoryLoad = MemoryLoadEager
	check(false, false, "memory loaded before the sandbox runs")
	e.MemoryLoad = MemoryLoadBackground
	check(true, true, "memory loads in the background")
}

func TestParseMemoryLoad(t *testing.T) {
	for in, want := range map[string]MemoryLoad{"auto": MemoryLoadAuto, "": MemoryLoadAuto, "eager": MemoryLoadEager, "background": MemoryLoadBackground} {
		if got, err := ParseMemoryLoad(in); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := ParseMemoryLoad("lazy"); err == nil || !strings.Contains(err.Error(), "want auto, eager or background") {
		t.Errorf("lazy: %v", err)
	}
}
