package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/runtime"
)

// TestExitOutcome: an exit code makes the actor EXITED with it, a signal
// CRASHED with 128+N, an end nothing saw EXITED with api.ExitUnknown; each with
// its time and a reason that says it.
func TestExitOutcome(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		exit  runtime.Exit
		known bool
		state api.State
		code  int
		says  string
	}{
		{runtime.Exit{Status: 3}, true, api.Exited, 3, "exited with code 3 at 2026-12-05T10:00:00Z"},
		{runtime.Exit{Status: 0}, true, api.Exited, 0, "exited with code 0"},
		{runtime.Exit{Status: 137}, true, api.Crashed, 137, "killed by signal 9 (exit status 137)"},
		{runtime.Exit{}, false, api.Exited, api.ExitUnknown, "how is unknown"},
	} {
		out := exitOutcome(c.exit, c.known, at)
		if out.State != c.state || out.ExitCode != c.code || !out.ExitedAt.Equal(at) || !strings.Contains(out.Reason, c.says) {
			t.Errorf("%+v (known %v): %+v; want %s, code %d, saying %q", c.exit, c.known, out, c.state, c.code, c.says)
		}
	}
}
