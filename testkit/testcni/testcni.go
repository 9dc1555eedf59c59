// Package testcni makes CNI networks for tests: one whose plugin does not
// answer, as one waiting on its daemon or on a lock another plugin holds.
package testcni

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Hanging is a CNI network (Network, a list in ConfDir) whose one plugin,
// "hangs" in BinDir, waits for ever on ADD, and on DEL once HangDel was
// called; it answers DEL otherwise.
type Hanging struct {
	ConfDir, BinDir, Network string
}

// plugin writes its pid for each command (pid.ADD, pid.DEL), then waits or
// answers.
const plugin = `#!/bin/sh
echo $$ > "$(dirname "$0")/pid.$CNI_COMMAND"
case "$CNI_COMMAND" in
ADD) exec sleep 600 ;;
DEL) [ -e "$(dirname "$0")/hang-del" ] && exec sleep 600; exit 0 ;;
esac
echo '{"cniVersion": "1.0.0", "supportedVersions": ["1.0.0"]}'
`

// NewHanging writes the network into folders of the test's own.
func NewHanging(t testing.TB) Hanging {
	t.Helper()
	h := Hanging{ConfDir: t.TempDir(), BinDir: t.TempDir(), Network: "hanging"}
	if err := os.WriteFile(filepath.Join(h.BinDir, "hangs"), []byte(plugin), 0o755); err != nil {
		t.Fatal(err)
	}
	list := `{"cniVersion": "1.0.0", "name": "hanging", "plugins": [{"type": "hangs"}]}`
	if err := os.WriteFile(filepath.Join(h.ConfDir, "10-hanging.conflist"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// HangDel makes the plugin wait on DEL too.
func (h Hanging) HangDel(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.BinDir, "hang-del"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Stopped fails the test unless the plugin ran for command (ADD, DEL) and
// its last run for it has ended.
func (h Hanging) Stopped(t testing.TB, command string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.BinDir, "pid."+command))
	if err != nil {
		t.Fatalf("the plugin was not run for %s: %v", command, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("the plugin's %s (pid %d) still runs: %v", command, pid, err)
	}
}
