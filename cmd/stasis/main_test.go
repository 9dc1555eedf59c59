package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/snapshot"
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

// TestStoreUpgrade: stasis store upgrade moves a format 2 repository to
// the current format and says so, says a current one is current, and
// refuses a locked one as busy (exit 6), changing nothing.
func TestStoreUpgrade(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	if _, err := runStasis(t, "store", "init", "--repo", repo); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(repo, "config")
	setVersion := func(from, to string) {
		data, err := os.ReadFile(config)
		if err != nil || !strings.Contains(string(data), from) {
			t.Fatalf("config %s: %v", data, err)
		}
		if err := os.WriteFile(config, []byte(strings.Replace(string(data), from, to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setVersion(`"version": 3`, `"version": 2`)

	// Another process's lock (a push in flight): busy, unchanged.
	lock := filepath.Join(repo, "locks", "other")
	if err := os.MkdirAll(filepath.Dir(lock), 0o700); err != nil {
		t.Fatal(err)
	}
	held := fmt.Sprintf(`{"exclusive": false, "host": "h", "pid": 1, "time": %q}`, time.Now().UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(lock, []byte(held), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"store", "upgrade", "--repo", repo}, &stdout, &stderr); code != 6 || !strings.Contains(stderr.String(), "locked") {
		t.Fatalf("upgrade of a locked repository: exit %d: %s", code, stderr.String())
	}
	if data, _ := os.ReadFile(config); !strings.Contains(string(data), `"version": 2`) {
		t.Fatalf("a refused upgrade changed the config: %s", data)
	}
	os.Remove(lock)

	out, err := runStasis(t, "store", "upgrade", "--repo", repo)
	if err != nil || !strings.Contains(out, "format 2 -> 3") {
		t.Fatalf("upgrade: %v\n%s", err, out)
	}
	out, err = runStasis(t, "store", "upgrade", "--repo", repo, "--json")
	var up struct{ From, To int }
	if err != nil || json.Unmarshal([]byte(out), &up) != nil || up.From != 3 || up.To != 3 {
		t.Fatalf("a second upgrade: %v\n%s", err, out)
	}
}

// TestSocketAndDataFromTheEnvironment: STASIS_SOCKET and STASIS_DATA stand
// in for --socket and --data on every command; the flags still win.
func TestSocketAndDataFromTheEnvironment(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "elsewhere.sock")
	t.Setenv("STASIS_SOCKET", socket)
	if _, err := runStasis(t, "actor", "ps"); err == nil || !strings.Contains(err.Error(), socket) {
		t.Fatalf("actor ps with STASIS_SOCKET=%s: %v; want it to try that socket", socket, err)
	}
	flag := filepath.Join(t.TempDir(), "flag.sock")
	if _, err := runStasis(t, "actor", "ps", "--socket", flag); err == nil || !strings.Contains(err.Error(), flag) {
		t.Fatalf("actor ps --socket %s: %v; want the flag to win", flag, err)
	}
	data := t.TempDir()
	t.Setenv("STASIS_DATA", data)
	if _, err := runStasis(t, "store", "init"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(data, "store", "config")); err != nil {
		t.Fatalf("store init with STASIS_DATA=%s made no store there: %v", data, err)
	}
}

// TestProbeCommandOfOneStringIsRefused: --probe-cmd 'python3 /app/get.py'
// is one program of that whole name; refused as a usage error (exit 2)
// that shows the argv meant, before stasisd is asked anything.
func TestProbeCommandOfOneStringIsRefused(t *testing.T) {
	var stdout, stderr bytes.Buffer
	socket := filepath.Join(t.TempDir(), "none.sock")
	code := run(context.Background(), []string{"template", "create", "t1", "--socket", socket, "--bundle", t.TempDir(), "--probe-cmd", "python3 /app/get.py"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--probe-cmd python3,/app/get.py") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if err := checkProbeCommand([]string{"python3", "/app/get.py"}); err != nil {
		t.Fatalf("an argv: %v", err)
	}
}

// TestExecCommandLine: what follows the actor is the command's (flags
// included, as docker exec reads them); stasis's flags between the actor
// and a -- are still stasis's.
func TestExecCommandLine(t *testing.T) {
	for _, c := range []struct {
		line []string
		want string
		json bool
	}{
		{[]string{"a1", "sh", "-c", "echo hi"}, "sh|-c|echo hi", false},
		{[]string{"a1", "--", "cat", "-n"}, "cat|-n", false},
		{[]string{"a1", "--json", "--", "cat"}, "cat", true},
		{[]string{"a1", "git", "log", "--", "f"}, "git|log|--|f", false},
	} {
		root, g := newRoot(io.Discard, io.Discard)
		exec, _, err := root.Find([]string{"actor", "exec"})
		if err != nil {
			t.Fatal(err)
		}
		if err := exec.ParseFlags(c.line); err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		args := exec.Flags().Args()
		got, err := execCommand(exec, args[1:])
		if err != nil || strings.Join(got, "|") != c.want || g.json != c.json {
			t.Errorf("%q: command %q (json %v), %v; want %q (json %v)", c.line, got, g.json, err, c.want, c.json)
		}
	}
}

// TestMain removes, after the tests, what they built to run in sandboxes.
func TestMain(m *testing.M) { testactor.Main(m) }

// TestStoreListIsATable: stasis store ls prints a header and one row a
// snapshot, its columns lined up whatever the names' lengths (an actor's
// id may be 63 characters, its stored name more).
func TestStoreListIsATable(t *testing.T) {
	repo := filepath.Join(t.TempDir(), "repo")
	if _, err := runStasis(t, "store", "init", "--repo", repo); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pages.img"), []byte("some pages"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a"}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("y", 63) + ".snap-0123456789ab"
	for _, name := range []string{"a.snap-0123456789ab", long} {
		if _, err := runStasis(t, "store", "push", "--repo", repo, dir, name); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runStasis(t, "store", "ls", "--repo", repo)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") {
		t.Fatalf("store ls: want a header and two rows:\n%s", out)
	}
	created := strings.Index(lines[0], "CREATED")
	for _, l := range lines[1:] {
		if created < len(long) || len(l) <= created || l[created-1] != ' ' || l[created] == ' ' || !strings.HasSuffix(l, " 1") {
			t.Fatalf("store ls: the CREATED column (at %d) does not line up, or FILES is not 1:\n%s", created, out)
		}
	}
}
