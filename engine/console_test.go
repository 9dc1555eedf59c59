package engine

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestConsoleTail: a failed probe quotes the last lines of the console,
// says where it is, and says so when it is empty; a console of more than
// consoleBytes is read from its end, never from a cut line.
func TestConsoleTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "console.log")
	if got := consoleTail(""); got != "" {
		t.Fatalf("no console: %q", got)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := consoleTail(path); !strings.Contains(got, "is empty") || !strings.Contains(got, path) {
		t.Fatalf("empty console: %q", got)
	}
	var b strings.Builder
	for i := range 2000 {
		b.WriteString(strings.Repeat("x", i%7) + " line " + strconv.Itoa(i) + "\n")
	}
	b.WriteString("OSError: [Errno 99] Cannot assign requested address\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := consoleTail(path)
	lines := strings.Split(got, "\n  ")
	if len(lines) != consoleLines+1 || !strings.HasSuffix(got, "OSError: [Errno 99] Cannot assign requested address") || !strings.HasSuffix(lines[1], "line 1991") {
		t.Fatalf("console tail:\n%s", got)
	}
}
