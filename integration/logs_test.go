package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/runtime"
)

// say has actor id's process print text on its console.
func (d *daemon) say(id, text string) {
	d.t.Helper()
	res, err := d.rt.Exec(context.Background(), api.SandboxID(id), runtime.Process{Args: []string{"/counter", "say", text}})
	if err != nil || res.ExitCode != 0 {
		d.t.Fatalf("say in %s: %v exit %d: %s", id, err, res.ExitCode, res.Stderr)
	}
}

// TestLogs: `stasis actor logs` prints what the actor's process wrote, the
// last lines with --tail and what came after a time with --since; a console
// over its bound (4 KiB here) is rotated and still read whole and in order;
// -f prints each line as it comes and ends when the process exits.
func TestLogs(t *testing.T) {
	d := newDaemon(t, "--console-max-size", "4KiB", "--console-files", "3")
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	d.say("a1", "hello 1")
	d.say("a1", "hello 2")
	out := d.cli("actor", "logs", "a1")
	if !strings.HasPrefix(out, "serving ") || !strings.HasSuffix(out, "\nhello 1\nhello 2\n") {
		t.Fatalf("logs:\n%s", out)
	}
	if out := d.cli("actor", "logs", "--tail", "1", "a1"); out != "hello 2\n" {
		t.Fatalf("logs --tail 1: %q", out)
	}

	// Once stasisd has marked the console, what comes later is what --since
	// a time after the mark reads.
	console := filepath.Join(d.data, "actors", "a1", "console.log")
	waitFor(t, "stasisd to mark the console", func() bool {
		st, err := os.Stat(console)
		marks, _ := os.ReadFile(console + ".marks")
		fields := strings.Fields(string(marks))
		return err == nil && len(fields) >= 2 && fields[len(fields)-1] == strconv.FormatInt(st.Size(), 10)
	})
	since := time.Now().UTC().Format(time.RFC3339Nano)
	d.say("a1", "hello 3")
	if out := d.cli("actor", "logs", "--since", since, "a1"); out != "hello 3\n" {
		t.Fatalf("logs --since %s: %q", since, out)
	}

	long := strings.Repeat("x", 5000)
	d.say("a1", long)
	waitFor(t, "stasisd to rotate the console past 4 KiB", func() bool {
		_, err := os.Stat(console + ".1")
		return err == nil
	})
	d.say("a1", "after the rotation")
	out = d.cli("actor", "logs", "a1")
	if !strings.HasPrefix(out, "serving ") || !strings.HasSuffix(out, "\nhello 1\nhello 2\nhello 3\n"+long+"\nafter the rotation\n") {
		t.Fatalf("logs across a rotation: %d bytes:\n%.300s", len(out), out)
	}
	if st, err := os.Stat(console); err != nil || st.Size() != int64(len("after the rotation\n")) {
		t.Fatalf("the console after its rotation: %v %v", st, err)
	}

	follow := exec.Command(stasisCLI.path(t), "--socket", d.socket, "actor", "logs", "-f", "--tail", "0", "a1")
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		ended <- follow.Wait()
	}()
	// The follow is under way once a line said after it started comes.
	for i := 1; ; i++ {
		d.say("a1", "followed "+strconv.Itoa(i))
		select {
		case line := <-lines:
			if !strings.HasPrefix(line, "followed ") {
				t.Fatalf("logs -f printed %q", line)
			}
		case <-time.After(2 * time.Second):
			continue
		}
		break
	}
	// Detached: an exec whose sandbox ends under it waits minutes.
	d.runsc("exec", "--detach", api.SandboxID("a1"), "/counter", "exit", "3")
	d.awaitState("a1", api.Exited)
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("logs -f of an actor that exited: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("logs -f still runs 30 s after its actor exited")
	}
	for line := range lines {
		if !strings.HasPrefix(line, "followed ") {
			t.Fatalf("logs -f printed %q", line)
		}
	}

	cmd := exec.Command(stasisCLI.path(t), "--socket", d.socket, "actor", "logs", "no-such-actor")
	if out, err := cmd.CombinedOutput(); exitCode(err) != 3 || !strings.Contains(string(out), "no-such-actor") {
		t.Fatalf("logs of no such actor: exit %d: %s", exitCode(err), out)
	}
	cmd = exec.Command(stasisCLI.path(t), "--socket", d.socket, "actor", "logs", "--since", "yesterday", "a1")
	if out, err := cmd.CombinedOutput(); exitCode(err) != 2 || !strings.Contains(string(out), "--since") {
		t.Fatalf("logs --since yesterday: exit %d: %s", exitCode(err), out)
	}
}

// TestCLIConventions: ps -q and its ls alias, rm of several actors (one
// missing: the others deleted, exit 3, the missing one named), rm -f of
// one missing (exit 0), and a mistyped command answered with the one
// meant.
func TestCLIConventions(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	d.run("counter", "a1.b")
	if out := d.cli("actor", "ls", "-q"); out != "a1\na1.b\n" {
		t.Fatalf("actor ls -q: %q", out)
	}
	if out := d.cli("actor", "ps"); !strings.Contains(out, "CREATED") || !strings.Contains(out, "Up ") {
		t.Fatalf("actor ps:\n%s", out)
	}
	stasis := func(args ...string) (string, int) {
		out, err := exec.Command(stasisCLI.path(t), append([]string{"--socket", d.socket}, args...)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	a1, err := d.api.InspectActor(context.Background(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if out := d.cli("actor", "ps", "-o", "wide"); !strings.Contains(out, "SANDBOX") || !strings.Contains(out, a1.Sandbox) {
		t.Fatalf("actor ps -o wide (a1's sandbox %s):\n%s", a1.Sandbox, out)
	}
	var listed []api.Actor
	if err := json.Unmarshal([]byte(d.cli("actor", "ps", "-o", "json")), &listed); err != nil || len(listed) != 2 || listed[0].ID != "a1" {
		t.Fatalf("actor ps -o json: %v %v", listed, err)
	}
	if out, code := stasis("actor", "ps", "-o", "tall"); code != 2 || !strings.Contains(out, "table (the default), wide or json") {
		t.Fatalf("actor ps -o tall: exit %d\n%s", code, out)
	}
	out, code := stasis("actor", "rm", "a1", "nosuch", "a1.b")
	if code != 3 || !strings.Contains(out, "deleted a1\n") || !strings.Contains(out, "deleted a1.b\n") || !strings.Contains(out, "1 of 3 actors not deleted: nosuch") {
		t.Fatalf("rm of three, one missing: exit %d\n%s", code, out)
	}
	if actors, err := d.api.ListActors(context.Background()); err != nil || len(actors) != 0 {
		t.Fatalf("after rm: %v %v", actors, err)
	}
	if out, code := stasis("actor", "rm", "-f", "nosuch"); code != 0 {
		t.Fatalf("rm -f of no such actor: exit %d\n%s", code, out)
	}
	if out, code := stasis("actor", "lgos", "a1"); code != 2 || !strings.Contains(out, "did you mean stasis actor logs?") {
		t.Fatalf("a mistyped command: exit %d\n%s", code, out)
	}
}

// TestStasisdRefusesToRunAsAUser: stasisd started as nobody refuses at
// once, saying why, and makes nothing; the CLI as nobody against a root
// stasisd's socket says it may not use it (exit 12), not that stasisd is
// down.
func TestStasisdRefusesToRunAsAUser(t *testing.T) {
	// A folder nobody may enter, with copies of the programs in it (the
	// built ones are in folders only root may enter).
	dir, err := os.MkdirTemp("", "as-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	asNobody := func(program string, args ...string) (string, int) {
		t.Helper()
		bin := filepath.Join(dir, filepath.Base(program))
		data, err := os.ReadFile(program)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	data := filepath.Join(dir, "data")
	out, code := asNobody(stasisd.path(t), "--data", data, "--socket", filepath.Join(dir, "sock"))
	if code == 0 || !strings.Contains(out, "uid 65534 and needs root") || strings.Count(out, "needs root") != 1 {
		t.Fatalf("stasisd as nobody: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(data); err == nil {
		t.Fatalf("stasisd as nobody made its data folder")
	}

	d := newDaemon(t)
	d.start("")
	// The socket's folder is root's: nobody reaches the socket itself
	// through a link in its own folder.
	link := filepath.Join(dir, "stasisd.sock")
	if err := os.Symlink(d.socket, link); err != nil {
		t.Fatal(err)
	}
	out, code = asNobody(stasisCLI.path(t), "--socket", link, "actor", "ps")
	if code != 12 || !strings.Contains(out, "may not use stasisd's socket") {
		t.Fatalf("stasis as nobody: exit %d\n%s", code, out)
	}
}

// TestEventsOfEveryActor: stasis events prints the events of every actor
// as they are added, each with its actor, from now (what came before not
// at all) or, with --after 0, the whole history first.
func TestEventsOfEveryActor(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "before")
	events := func(args ...string) (<-chan api.Event, func()) {
		cmd := exec.Command(stasisCLI.path(t), append([]string{"--socket", d.socket, "--json", "events"}, args...)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		seen := make(chan api.Event, 100)
		go func() {
			defer close(seen)
			dec := json.NewDecoder(stdout)
			for {
				var e api.Event
				if dec.Decode(&e) != nil {
					return
				}
				seen <- e
			}
		}()
		return seen, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	}
	// until reads events until each actor named has shown one, and
	// returns the actors it saw.
	until := func(seen <-chan api.Event, want ...string) map[string]bool {
		t.Helper()
		got := map[string]bool{}
		for {
			done := true
			for _, w := range want {
				done = done && got[w]
			}
			if done {
				return got
			}
			select {
			case e, ok := <-seen:
				if !ok {
					t.Fatalf("stasis events ended; saw %v", got)
				}
				got[e.Actor] = true
			case <-time.After(time.Minute):
				t.Fatalf("stasis events: no event of %v in a minute; saw %v", want, got)
			}
		}
	}
	live, stop := events()
	defer stop()
	// The watch is under way once an event of a pause after it started
	// shows: started before the pause, it might miss the first of them.
	d.op("Pause", "before")
	d.run("counter", "a1")
	d.run("counter", "a2")
	if got := until(live, "a1", "a2"); !got["a1"] || !got["a2"] {
		t.Fatalf("live: %v", got)
	}
	all, stopAll := events("--after", "0")
	defer stopAll()
	until(all, "before", "a1", "a2")
}

// TestExecStreams: exec prints a command's output as it comes, before the
// command ends, and exits with its code.
func TestExecStreams(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	cmd := exec.Command(stasisCLI.path(t), "--socket", d.socket, "actor", "exec", "a1", "/counter", "waitfile", "/state/go")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	// The first line comes while the command still waits: only the test
	// ends its wait, after reading it.
	if !lines.Scan() || lines.Text() != "waiting for /state/go" {
		t.Fatalf("exec's first line: %q %v", lines.Text(), lines.Err())
	}
	durable, err := filepath.Glob(filepath.Join(d.data, "actors", "a1", "durable", "*"))
	if err != nil || len(durable) != 1 {
		t.Fatalf("a1's durable folder: %v %v", durable, err)
	}
	if err := os.WriteFile(filepath.Join(durable[0], "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() || lines.Text() != "found /state/go" {
		t.Fatalf("exec's second line: %q %v", lines.Text(), lines.Err())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec: %v", err)
	}
	out, err := exec.Command(stasisCLI.path(t), "--socket", d.socket, "actor", "exec", "a1", "/counter", "nonsense").CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), "unknown command") || !strings.Contains(string(out), "/counter exited 2 in a1") {
		t.Fatalf("exec of a failing command: exit %d\n%s", exitCode(err), out)
	}
	// An exec cut off at its deadline while the command inside runs on
	// (holding the output runsc handed it) returns soon after the
	// deadline, not when the command ends: a probe cannot hang on it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = d.rt.Exec(ctx, api.SandboxID("a1"), runtime.Process{Args: []string{"/counter", "waitfile", "/never"}})
	if took := time.Since(start); err == nil || took > 20*time.Second {
		t.Fatalf("an exec past its 1 s deadline returned after %s: %v", took, err)
	}
}
