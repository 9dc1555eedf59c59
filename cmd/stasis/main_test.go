package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildStasis builds the stasis binary: the demo mounts it into the sandbox
// as the demo actor, so it must be a real executable, not the test binary.
func buildStasis(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stasis")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestDemoJSON runs the quick start's main job and checks its JSON report.
func TestDemoJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the demo runs a real runsc sandbox and needs root")
	}
	bin := buildStasis(t)
	data := t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "demo", "--json", "--data", data, "--runsc-root", filepath.Join(data, "runsc"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("stasis demo: %v\n%s", err, stderr.String())
	}
	var res struct {
		StatePreserved bool   `json:"statePreserved"`
		Snapshot       string `json:"snapshot"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if !res.StatePreserved {
		t.Errorf("demo report %s", stdout.String())
	}
	// --json progress is one JSON event a line on stderr.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var ev struct{ Op, Step string }
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev.Op != "suspend" || ev.Step != "preflight" {
		t.Errorf("first progress line %q: %v", lines[0], err)
	}
	out, err := exec.Command(bin, "snapshot", "verify", "--json", res.Snapshot).Output()
	if err != nil || !strings.Contains(string(out), `"ok": true`) {
		t.Errorf("snapshot verify: %v %s", err, out)
	}
}

func TestUnknownSnapshotIsAClearError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs([]string{"snapshot", "verify", t.TempDir()})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "no manifest") {
		t.Fatalf("got %v", err)
	}
}
