package lifecycle

import (
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/journal"
)

// TestRestartWanted: docker's policies, over how a process ended.
func TestRestartWanted(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	exited := func(code int) journal.Actor {
		return journal.Actor{State: string(api.Exited), ExitCode: code, ExitedAt: at}
	}
	killed := journal.Actor{State: string(api.Crashed), ExitCode: 137, ExitedAt: at}
	failedStart := journal.Actor{State: string(api.Crashed)}
	busy := exited(1)
	busy.Running = &journal.Operation{Kind: "resume"}
	for _, c := range []struct {
		policy string
		a      journal.Actor
		want   bool
	}{
		{"", exited(1), false},
		{api.RestartNever, killed, false},
		{api.RestartOnFailure, exited(0), false},
		{api.RestartOnFailure, exited(api.ExitUnknown), true},
		{api.RestartOnFailure, exited(3), true},
		{api.RestartOnFailure, killed, true},
		{api.RestartAlways, exited(0), true},
		{api.RestartAlways, failedStart, false},
		{api.RestartAlways, busy, false},
	} {
		if got := restartWanted(c.policy, c.a); got != c.want {
			t.Errorf("%q over %s code %d exited %v running %v: %v, want %v", c.policy, c.a.State, c.a.ExitCode, !c.a.ExitedAt.IsZero(), c.a.Running != nil, got, c.want)
		}
	}
}

// TestRestartDelay: the pause doubles with each quick restart, up to the
// bound, and starts again after a restart that ran long enough.
func TestRestartDelay(t *testing.T) {
	w := newExitWatch()
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	now := start
	var got []time.Duration
	for range 12 {
		d := w.restartDelay("a1", now)
		got = append(got, d)
		now = now.Add(d)
		w.restarts.last["a1"] = now
		now = now.Add(time.Second) // ran a second, then ended
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond, 25600 * time.Millisecond, 51200 * time.Millisecond, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("quick restarts: pauses %v, want %v", got, want)
		}
	}
	// Ran 10 s or more: the next pause is the first again.
	if d := w.restartDelay("a1", now.Add(api.RestartReset)); d != api.RestartFirstDelay {
		t.Errorf("after a restart that ran %s: %s, want %s", api.RestartReset, d, api.RestartFirstDelay)
	}
	if d := w.restartDelay("a2", now); d != api.RestartFirstDelay {
		t.Errorf("another actor's first: %s", d)
	}
}
