package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stasis-run/stasis/testkit/testactor"
)

// startStasisd starts stasisd on data with its defaults, as the quick start
// does, and returns its socket once it serves (its log says so).
func startStasisd(t *testing.T, data string) string {
	t.Helper()
	socket := filepath.Join(data, "stasisd.sock")
	cmd := exec.Command(stasisd.path(t), "--data", data, "--socket", socket, "--log-format", "text")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		testactor.UnpinNetNS(filepath.Join(data, "runsc"))
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "stasisd serving") {
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return socket
		}
	}
	t.Fatal("stasisd exited before serving")
	return ""
}

// These tests drive the stasis CLI against a real stasisd.

// TestDemoJSON runs the quick start's main job against a real stasisd and
// checks its JSON report, then the snapshot it stored.
func TestDemoJSON(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the demo runs a real runsc sandbox and needs root")
	}
	// The demo mounts the stasis binary into the sandbox as the demo
	// actor, so it runs as a real executable, not in this process.
	bin := stasisCLI.path(t)
	data := t.TempDir()
	socket := startStasisd(t, data)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "demo", "--json", "--data", data, "--socket", socket)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("stasis demo: %v\n%s", err, stderr.String())
	}
	var res struct {
		StatePreserved bool   `json:"statePreserved"`
		Before         string `json:"before"`
		After          string `json:"after"`
		SnapshotDir    string `json:"snapshotDir"`
		Stored         string `json:"stored"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if !res.StatePreserved || res.Stored == "" {
		t.Errorf("demo report %s", stdout.String())
	}
	// --json progress is one JSON event a line on stderr.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var ev struct{ Step string }
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil || ev.Step != "network" {
		t.Errorf("first progress line %q: %v", lines[0], err)
	}
	run := func(args ...string) (string, error) {
		t.Helper()
		args = append(args, "--data", data, "--socket", socket)
		out, err := exec.Command(bin, args...).CombinedOutput()
		return string(out), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("stasis %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	// The actor was deleted with its local snapshot; the stored one is in
	// the embedded store, whole, and comes back.
	if ls := mustRun("store", "ls", "--json"); !strings.Contains(ls, `"name": "`+res.Stored+`"`) {
		t.Errorf("store ls: %s", ls)
	}
	mustRun("store", "verify")
	fetched := filepath.Join(t.TempDir(), "fetched")
	mustRun("store", "pull", res.Stored, fetched)
	if out := mustRun("snapshot", "verify", "--json", fetched); !strings.Contains(out, `"ok": true`) {
		t.Errorf("snapshot verify: %s", out)
	}
	// This node can restore it; a node on another platform cannot, and says so.
	if out := mustRun("snapshot", "check", "--json", fetched); !strings.Contains(out, `"compatible": true`) {
		t.Errorf("snapshot check on this node: %s", out)
	}
	info := mustRun("node", "info", "--json")
	kvm := filepath.Join(t.TempDir(), "kvm-node.json")
	if err := os.WriteFile(kvm, []byte(strings.Replace(info, `"platform": "systrap"`, `"platform": "kvm"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("snapshot", "check", fetched, "--node", kvm); err == nil || !strings.Contains(out, "runtime platform systrap needed, node runs kvm") || !strings.Contains(out, "no node given can restore") {
		t.Errorf("snapshot check against a KVM node: %v\n%s", err, out)
	}
	// The daemon's fingerprint is the same node's.
	if out := mustRun("snapshot", "check", "--json", fetched, "--node", "unix://"+socket); !strings.Contains(out, `"compatible": true`) {
		t.Errorf("snapshot check against stasisd's fingerprint: %s", out)
	}
	if ls := mustRun("snapshot", "ls"); !strings.Contains(ls, res.Stored) {
		t.Errorf("snapshot ls: %s", ls)
	}
	// The demo actor is gone; the CLI says so in words.
	if out, err := run("actor", "inspect", "stasis-demo"); err == nil || !strings.Contains(out, "not found") {
		t.Errorf("actor inspect after the demo: %v %s", err, out)
	}
}
