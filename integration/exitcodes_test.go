package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
)

// TestExitCodes: each failure a user meets exits with the code of its
// category (docs/cli.md): a bad argument 2, not found 3, already exists 4,
// not now 5, stasisd out of reach 8, the host path policy 12; never 1
// (internal) for a user's mistake.
func TestExitCodes(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	tpl := d.template("counter", nil)
	d.run("counter", "a1")
	bundles := filepath.Dir(tpl.Bundle)
	d.template("no-exe", func(t *api.Template) {
		t.Bundle, t.Rootfs, t.Args = "", filepath.Join(tpl.Bundle, "rootfs"), []string{"/no/such/exe"}
	})
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"template", "create", "t", "--rootfs", bundles, "--memory", "lots", "--", "/counter"}, 2, "--memory"},
		{[]string{"template", "create", "t", "--rootfs", bundles, "--memory", "1PiB", "--", "/counter"}, 2, "--memory"},
		{[]string{"template", "create", "t", "--bundle", "/nonexistent/bundle"}, 12, "not in a folder templates may use"},
		{[]string{"template", "create", "t", "--bundle", filepath.Join(bundles, "missing")}, 3, "does not exist"},
		{[]string{"template", "create", "counter", "--bundle", tpl.Bundle}, 4, "counter"},
		{[]string{"template", "create", "t", "--bundle", tpl.Bundle, "--restart", "sometimes"}, 2, "on-failure"},
		{[]string{"template", "rm", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "run", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "run", "counter", "--id", "a1"}, 4, "a1"},
		{[]string{"actor", "run", "no-exe", "--id", "x1"}, 2, "cannot be started from its root filesystem"},
		{[]string{"actor", "inspect", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "pause", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "suspend", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "resume", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "resume", "a1"}, 5, "RUNNING"},
		{[]string{"actor", "rm", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "logs", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "logs", "--tail", "x", "a1"}, 2, "--tail"},
		{[]string{"actor", "events", "nosuch"}, 3, "nosuch"},
		{[]string{"actor", "exec", "nosuch", "true"}, 3, "nosuch"},
		{[]string{"actor", "exec", "a1"}, 2, "exec needs an actor and a command"},
		{[]string{"actor", "ps", "extra"}, 2, "extra"},
		{[]string{"actor", "run", "counter", "a2"}, 2, "usage: stasis actor run TEMPLATE [--id ID]"},
		{[]string{"actor"}, 2, "needs a subcommand"},
		{[]string{"actor", "lgos"}, 2, "did you mean"},
		{[]string{"snapshot", "inspect", "nosuch"}, 3, "nosuch"},
		{[]string{"--socket", filepath.Join(d.data, "no.sock"), "actor", "ps"}, 8, "cannot reach stasisd"},
	} {
		args := append([]string{"--socket", d.socket, "--data", d.data}, c.args...)
		out, err := exec.Command(stasisCLI.path(t), args...).CombinedOutput()
		if exitCode(err) != c.code || !strings.Contains(string(out), c.says) {
			t.Errorf("stasis %s: exit %d, want %d saying %q:\n%s", strings.Join(c.args, " "), exitCode(err), c.code, c.says, out)
		}
	}
	// A second stasisd on the socket is refused, once, before it makes
	// its data folder.
	data := filepath.Join(t.TempDir(), "second")
	out, err := exec.Command(stasisd.path(t), "--data", data, "--socket", d.socket).CombinedOutput()
	if exitCode(err) == 0 || strings.Count(string(out), "another stasisd is serving on "+d.socket) != 1 {
		t.Errorf("a second stasisd on the socket: exit %d\n%s", exitCode(err), out)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused stasisd made its data folder: %v", err)
	}
}
