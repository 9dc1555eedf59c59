package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/testkit/testactor"
)

func TestUnknownSnapshotIsAClearError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"snapshot", "verify", t.TempDir()}, &stdout, &stderr)
	if code != 3 || !strings.Contains(stderr.String(), "no manifest") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// runStasis runs the CLI in this process and returns its standard output,
// and its standard error as the error when it exits non-zero.
func runStasis(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
		return stdout.String(), fmt.Errorf("exit %d: %s", code, stderr.String())
	}
	return stdout.String(), nil
}

func TestNodeInfoAndLabels(t *testing.T) {
	runscRoot := testactor.RunscRoot(t)
	out, err := runStasis(t, "node", "info", "--json", "--runsc-root", runscRoot)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fingerprint.Parse([]byte(out))
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

// TestGlobalFlagsAreFew: the help lists as global only the flags every
// command uses; a command lists those it uses; the flags that were global
// before still parse anywhere, unlisted.
func TestGlobalFlagsAreFew(t *testing.T) {
	help, err := runStasis(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--socket", "--repo", "--runsc", "--platform", "--gpu-path"} {
		if strings.Contains(help, flag) {
			t.Errorf("stasis --help lists %s as global:\n%s", flag, help)
		}
	}
	if !strings.Contains(help, "--data") || !strings.Contains(help, "--json") {
		t.Errorf("stasis --help lacks --data or --json:\n%s", help)
	}
	for cmd, flag := range map[string]string{"actor": "--socket", "store": "--repo", "suspend": "--runsc"} {
		out, err := runStasis(t, cmd, "--help")
		if err != nil || !strings.Contains(out, flag) {
			t.Errorf("stasis %s --help does not list %s: %v\n%s", cmd, flag, err, out)
		}
	}
	// store verify of nothing, with flags it does not use: not refused as
	// unknown (exit 2), but run (the store is not there: exit 3).
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"store", "verify", "--socket", "/nowhere", "--runsc", "/nowhere", "--repo", filepath.Join(t.TempDir(), "none")}, &stdout, &stderr)
	if code != 3 {
		t.Fatalf("store verify with the flags that were global: exit %d: %s", code, stderr.String())
	}
}
