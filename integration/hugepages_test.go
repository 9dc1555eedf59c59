package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/node"
)

// TestSandboxHugePages starts stasisd on a host whose transparent huge page
// settings keep sandbox memory in 4 KiB pages, as a stock kernel's do:
// with --sandbox-huge-pages keep it leaves them and says so; by default it
// sets them at start and says so. Actors pause and resume either way. The
// host's settings are put back after.
func TestSandboxHugePages(t *testing.T) {
	dir := node.HugePagesDir
	saved, err := node.ReadHugePages(dir)
	if err != nil {
		t.Fatal(err)
	}
	set := func(shmem, defrag string) {
		t.Helper()
		for name, value := range map[string]string{"shmem_enabled": shmem, "defrag": defrag} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { set(saved.ShmemEnabled, saved.Defrag) })
	set("never", "madvise")

	cycle := func(d *daemon, id string) string {
		t.Helper()
		d.template("counter", nil)
		d.run("counter", id)
		inst, _, _ := strings.Cut(d.counter(id, "incr"), " ")
		d.op("Pause", id)
		d.op("Resume", id)
		if got := d.counter(id, "incr"); got != inst+" 2" {
			t.Fatalf("after pause and resume the counter says %q, want %q", got, inst+" 2")
		}
		return stepMessage(t, d, id, "restore")
	}

	kept := newDaemon(t, "--sandbox-huge-pages", "keep", "--keep-paused", "never")
	kept.start("")
	if h, err := node.ReadHugePages(dir); err != nil || h.ShmemEnabled != "never" || h.Defrag != "madvise" {
		t.Fatalf("--sandbox-huge-pages keep changed the settings: %+v %v", h, err)
	}
	if !strings.Contains(kept.logText(), "sandbox memory in 4 KiB pages") {
		t.Errorf("stasisd with --sandbox-huge-pages keep does not warn of 4 KiB pages:\n%s", kept.logText())
	}
	if msg := cycle(kept, "a1"); msg != "memory loads in the background: no GPU state to restore" {
		t.Errorf("restore with 4 KiB pages: %q", msg)
	}
	kept.stop()

	tuned := newDaemon(t, "--keep-paused", "never")
	tuned.start("")
	h, err := node.ReadHugePages(dir)
	if err != nil || h.ShmemEnabled != "advise" || h.Defrag != "defer" || !h.Sandbox {
		t.Fatalf("stasisd did not set the settings runsc needs: %+v %v", h, err)
	}
	if !strings.Contains(tuned.logText(), "transparent huge pages set") {
		t.Errorf("stasisd's log does not say it changed the settings:\n%s", tuned.logText())
	}
	// A CPU actor's memory loads in the background whatever the pages
	// (engine.TestMemoryLoadAuto covers the GPU actor's choice).
	if msg := cycle(tuned, "a2"); msg != "memory loads in the background: no GPU state to restore" {
		t.Errorf("restore with huge pages: %q", msg)
	}

	// stasis node tune does the same by hand, and says what it did.
	set("never", "madvise")
	tune := func() map[string]node.HugePages {
		t.Helper()
		out, err := exec.Command(stasisCLI.path(t), "node", "tune", "--json").Output()
		var got map[string]node.HugePages
		if err != nil || json.Unmarshal(out, &got) != nil {
			t.Fatalf("stasis node tune --json: %v\n%s", err, out)
		}
		return got
	}
	want := map[string]node.HugePages{"before": {ShmemEnabled: "never", Defrag: "madvise"}, "after": {ShmemEnabled: "advise", Defrag: "defer", Sandbox: true}}
	if got := tune(); !reflect.DeepEqual(got, want) {
		t.Errorf("stasis node tune: %+v, want %+v", got, want)
	}
	if got := tune(); got["before"] != want["after"] || got["after"] != want["after"] {
		t.Errorf("stasis node tune a second time: %+v, want no change", got)
	}
	out, err := exec.Command(stasisCLI.path(t), "node", "info", "--data", t.TempDir()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "huge pages: sandbox memory in huge pages (shmem_enabled advise, defrag defer)") || !strings.Contains(string(out), "write-back: from ") {
		t.Errorf("stasis node info: %v\n%s", err, out)
	}

	// A value stasisd does not know is refused before anything changes.
	set("never", "madvise")
	data := t.TempDir()
	out, err = exec.Command(stasisd.path(t), "--data", filepath.Join(data, "d"), "--socket", filepath.Join(data, "s"), "--sandbox-huge-pages", "always").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "want enable or keep") {
		t.Fatalf("--sandbox-huge-pages always: %v\n%s", err, out)
	}
	if h, err := node.ReadHugePages(dir); err != nil || h.ShmemEnabled != "never" || h.Defrag != "madvise" {
		t.Fatalf("a refused stasisd changed the settings: %+v %v", h, err)
	}
	if _, err := os.Stat(filepath.Join(data, "d")); !os.IsNotExist(err) {
		t.Fatalf("a refused stasisd made its data folder: %v", err)
	}
}
