package integration

import (
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
)

// TestIDsThatSharePrefixes: actors whose ids begin one another (a1 beside
// a10, b1 beside b10), as users name them, run, pause, suspend and resume
// side by side, in either order of creation, and survive a kill -9 of
// stasisd, each with its own counter. runsc resolves container ids by
// prefix, so this holds only because no sandbox id begins another.
func TestIDsThatSharePrefixes(t *testing.T) {
	d := newDaemon(t, "--keep-paused", "auto")
	d.start("")
	d.template("counter", nil)
	ids := []string{"a10", "a1", "b1", "b10"} // a longer id first, and last
	inst := map[string]string{}
	for _, id := range ids {
		d.run("counter", id)
		inst[id] = d.execCounter(id, "incr")
	}
	for _, id := range ids {
		prefix, _, _ := strings.Cut(inst[id], " ")
		if got := d.execCounter(id, "incr"); got != prefix+" 2" {
			t.Fatalf("%s counts %q after %q: another actor's sandbox answered", id, got, inst[id])
		}
	}
	d.op("Suspend", "b1")
	d.op("Pause", "a1")
	d.op("Pause", "b10")
	for id, want := range map[string]api.State{"a10": api.Running, "a1": api.Paused, "b1": api.Suspended, "b10": api.Paused} {
		if a := d.inspect(id); a.State != want || a.Operation != nil {
			t.Fatalf("%s: %+v, want %s", id, a, want)
		}
	}
	// kill -9 and a new start: every actor where it was, none CRASHED.
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.cmd = nil
	d.start("")
	for id, want := range map[string]api.State{"a10": api.Running, "a1": api.Paused, "b1": api.Suspended, "b10": api.Paused} {
		if a := d.inspect(id); a.State != want {
			t.Fatalf("after kill -9 and a new start, %s: %+v, want %s", id, a, want)
		}
	}
	for _, id := range []string{"a1", "b1", "b10"} {
		d.op("Resume", id)
	}
	for _, id := range ids {
		prefix, _, _ := strings.Cut(inst[id], " ")
		if got := d.execCounter(id, "incr"); got != prefix+" 3" {
			t.Fatalf("%s counts %q after its resume; want %s 3", id, got, prefix)
		}
		if a := d.inspect(id); a.Sandbox != api.SandboxID(id) {
			t.Fatalf("%s's sandbox is %q", id, a.Sandbox)
		}
	}
	for _, id := range ids {
		d.op("Delete", id)
		d.requireNoSandbox(id)
	}
}

// TestSandboxesNamedByAnOlderStasisd: sandboxes an older stasisd named by
// the actor id itself (w2 beside w20, which runsc cannot tell apart) are
// taken over: after kill -9 and a new start neither actor is CRASHED nor
// its sandbox removed; w2, which runsc calls ambiguous, is refused with
// the cause named and stays RUNNING; w20 suspends and resumes into a
// sandbox of the new name, after which w2 is no longer ambiguous and
// does the same (a pause that keeps the sandbox in memory keeps its name).
func TestSandboxesNamedByAnOlderStasisd(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	for _, id := range []string{"w2", "w20"} {
		d.run("counter", id)
	}
	d.stop()
	// What an older stasisd left: sandboxes named by the actor ids, and
	// the journal saying so.
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.data, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range []string{"w2", "w20"} {
		if err := d.rt.Stop(ctx, api.SandboxID(id)); err != nil {
			t.Fatal(err)
		}
		if err := d.rt.Delete(ctx, api.SandboxID(id)); err != nil {
			t.Fatal(err)
		}
		// runsc itself: Runsc.Create no longer makes an id that begins
		// another's, as an older stasisd did.
		dir := filepath.Join(d.data, "actors", id)
		console, err := os.OpenFile(filepath.Join(dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"create", "--bundle", filepath.Join(dir, "bundle"), id}, {"start", id}} {
			cmd := exec.Command(d.rt.Path(), append(d.rt.GlobalFlags(), args...)...)
			cmd.Stdout, cmd.Stderr = console, console
			if err := cmd.Run(); err != nil {
				t.Fatalf("runsc %v: %v", args, err)
			}
		}
		console.Close()
		if _, err := db.Exec(`UPDATE actors SET sandbox = ? WHERE id = ?`, id, id); err != nil {
			t.Fatal(err)
		}
	}
	d.start("")
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.cmd = nil
	d.start("")
	for _, id := range []string{"w2", "w20"} {
		if a := d.inspect(id); a.State != api.Running || a.Sandbox != id {
			t.Fatalf("after a new start, %s: %+v; want it RUNNING in its old sandbox", id, a)
		}
	}
	// runsc takes "w2" for the beginning of "w20": refused, nothing lost.
	if _, err := d.api.Suspend(ctx, api.OpRequest{ID: "w2"}); err == nil || !strings.Contains(err.Error(), "begins with its own") {
		t.Fatalf("suspend of w2 beside w20, both named the old way: %v", err)
	}
	if a := d.inspect("w2"); a.State != api.Running {
		t.Fatalf("after the refused suspend, w2: %+v", a)
	}
	if _, err := d.rt.State(ctx, "w20"); err != nil {
		t.Fatalf("w20's old sandbox: %v", err)
	}
	w20 := d.execCounter("w20", "incr")
	d.op("Suspend", "w20")
	d.op("Resume", "w20")
	if a := d.inspect("w20"); a.Sandbox != api.SandboxID("w20") {
		t.Fatalf("w20 resumed into sandbox %q", a.Sandbox)
	}
	prefix, _, _ := strings.Cut(w20, " ")
	if got := d.execCounter("w20", "incr"); got != prefix+" 2" {
		t.Fatalf("w20 counts %q after its resume", got)
	}
	w2 := d.execCounter("w2", "incr")
	d.op("Suspend", "w2")
	d.op("Resume", "w2")
	prefix, _, _ = strings.Cut(w2, " ")
	if got, a := d.execCounter("w2", "incr"), d.inspect("w2"); got != prefix+" 2" || a.Sandbox != api.SandboxID("w2") {
		t.Fatalf("w2 after suspend and resume: counts %q, %+v", got, a)
	}
}

// execCounter runs "/counter await CMD" in actor id through stasisd's API,
// which finds its sandbox whatever it is named.
func (d *daemon) execCounter(id, cmd string) string {
	d.t.Helper()
	res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: id, Args: []string{"/counter", "await", cmd}})
	if err != nil || res.ExitCode != 0 {
		d.t.Fatalf("counter %s in %s: %v %+v", cmd, id, err, res)
	}
	return strings.TrimSpace(res.Stdout)
}
