package integration

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
)

// TestEventsFollowed: `stasis actor events -f` follows an actor's history
// through the API's stream from a real stasisd: what was there, then the
// steps of an operation as it runs, one JSON object a line, and it ends by
// itself when the actor is deleted.
func TestEventsFollowed(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	cmd := exec.Command(stasisCLI.path(t), "actor", "events", "a1", "-f", "--json", "--socket", d.socket)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	next := func() api.Event {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("the follow ended early: %v", lines.Err())
		}
		var e api.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("a line that is not an event: %q: %v", lines.Text(), err)
		}
		return e
	}
	// The run's history first: its probe among it.
	for e := next(); e.Step != engine.StepProbe; e = next() {
	}
	d.op("Pause", "a1")
	var steps []string
	for e := next(); e.Step != engine.StepCommit; e = next() {
		steps = append(steps, e.Step)
	}
	d.op("Delete", "a1")
	for lines.Scan() {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the follow of a deleted actor ended with %v; want exit 0", err)
	}
	t.Logf("pause steps followed before the commit: %v", steps)
}
