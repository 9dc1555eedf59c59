package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/node"
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
		Before         string `json:"before"`
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

	// This node can restore it; a node on another platform cannot, and says so.
	if out, err := exec.Command(bin, "snapshot", "check", "--json", res.Snapshot, "--runsc-root", filepath.Join(data, "runsc")).Output(); err != nil || !strings.Contains(string(out), `"compatible": true`) {
		t.Errorf("snapshot check on this node: %v %s", err, out)
	}
	info, err := exec.Command(bin, "node", "info", "--json", "--runsc-root", filepath.Join(data, "runsc")).Output()
	if err != nil {
		t.Fatal(err)
	}
	kvm := filepath.Join(t.TempDir(), "kvm-node.json")
	if err := os.WriteFile(kvm, bytes.Replace(info, []byte(`"platform": "systrap"`), []byte(`"platform": "kvm"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "snapshot", "check", res.Snapshot, "--node", kvm).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "runtime platform systrap needed, node runs kvm") || !strings.Contains(string(out), "no node given can restore") {
		t.Errorf("snapshot check against a KVM node: %v\n%s", err, out)
	}

	// The snapshot goes to the embedded store, comes back into a new folder,
	// and the actor resumes from it: the same process, counting on from 3.
	run := func(args ...string) string {
		t.Helper()
		args = append(args, "--data", data, "--runsc-root", filepath.Join(data, "runsc"))
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("stasis %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("store", "push", res.Snapshot, "demo-1")
	if ls := run("store", "ls", "--json"); !strings.Contains(ls, `"name": "demo-1"`) {
		t.Errorf("store ls: %s", ls)
	}
	if du := run("store", "du"); !strings.Contains(du, "1 snapshots") {
		t.Errorf("store du: %s", du)
	}
	run("store", "verify")
	fetched := filepath.Join(t.TempDir(), "fetched")
	run("resume", "stasis-demo", "--bundle", filepath.Join(data, "demo", "bundle"), "--snapshot", fetched, "--pull", "demo-1")
	defer run("store", "rm", "demo-1")
	defer exec.Command("runsc", "--root", filepath.Join(data, "runsc"), "delete", "--force", "stasis-demo").Run()
	counter, err := exec.Command("runsc", "--root", filepath.Join(data, "runsc"), "exec", "stasis-demo", "/.stasis/bin/stasis", "demo-actor", "incr").Output()
	process, _, _ := strings.Cut(res.Before, " ")
	if want := process + " 4"; err != nil || strings.TrimSpace(string(counter)) != want {
		t.Errorf("counter after resume from the store: %q %v; want %q", counter, err, want)
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

func runStasis(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs(args)
	err := root.Execute()
	return stdout.String(), err
}

func TestNodeInfoAndLabels(t *testing.T) {
	runscRoot := filepath.Join(t.TempDir(), "runsc")
	out, err := runStasis(t, "node", "info", "--json", "--runsc-root", runscRoot)
	if err != nil {
		t.Fatal(err)
	}
	f, err := node.Parse([]byte(out))
	if err != nil {
		t.Fatalf("node info --json is not a valid fingerprint: %v\n%s", err, out)
	}
	file := filepath.Join(t.TempDir(), "features.d", "stasis")
	if _, err := runStasis(t, "node", "labels", "--write", file, "--ttl", "1h", "--runsc-root", runscRoot); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(written), "stasis.dev/class="+f.Class()+"\n") || !strings.Contains(string(written), "# +expiry-time=") {
		t.Fatalf("feature file:\n%s", written)
	}
}

func TestPlanTemplateShowsArithmetic(t *testing.T) {
	out, err := runStasis(t, "plan", "template", "--gpus", "2", "--gpu-memory", "80GiB", "--actor-memory", "6GiB", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Limit      uint64   `json:"memoryLimitBytes"`
		Arithmetic []string `json:"arithmetic"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Limit != (6+2*4+2*80)<<30 || len(rec.Arithmetic) != 4 {
		t.Fatalf("%+v", rec)
	}
	if _, err := runStasis(t, "plan", "template", "--gpu-memory", "lots"); err == nil || !strings.Contains(err.Error(), "--gpu-memory") {
		t.Fatalf("bad size: %v", err)
	}
}
