package main

import (
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
)

// TestStatus: ps's STATUS says what docker ps says of a container.
func TestStatus(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		a    api.Actor
		want string
	}{
		{api.Actor{State: api.Running, UpdatedAt: now.Add(-5 * time.Minute)}, "Up 5 minutes"},
		{api.Actor{State: api.Exited, ExitCode: 3, ExitedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour)}, "Exited (3) 2 hours ago"},
		{api.Actor{State: api.Exited, ExitCode: api.ExitUnknown, ExitedAt: now.Add(-30 * time.Second)}, "Exited (?) 30 seconds ago"},
		{api.Actor{State: api.Crashed, ExitCode: 137, ExitedAt: now.Add(-time.Minute)}, "Exited (137) About a minute ago"},
		{api.Actor{State: api.Crashed, UpdatedAt: now.Add(-3 * 24 * time.Hour)}, "Crashed 3 days"},
		{api.Actor{State: api.Suspended, Idle: true, UpdatedAt: now.Add(-90 * time.Minute)}, "Suspended (idle) 2 hours"},
		{api.Actor{State: api.Resuming, Operation: &api.Operation{Kind: "resume", StartedAt: now.Add(-4 * time.Second)}}, "resuming (resume) for 4 seconds"},
	} {
		if got := status(c.a, now); got != c.want {
			t.Errorf("%s: %q, want %q", c.a.State, got, c.want)
		}
	}
	for d, want := range map[time.Duration]string{
		0: "Less than a second", time.Second: "1 second", 59 * time.Second: "59 seconds", 119 * time.Second: "About a minute",
		59 * time.Minute: "59 minutes", 80 * time.Minute: "About an hour", 47 * time.Hour: "47 hours", 13 * 24 * time.Hour: "13 days",
		20 * 24 * time.Hour: "2 weeks", 90 * 24 * time.Hour: "3 months", 800 * 24 * time.Hour: "2 years",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
}
