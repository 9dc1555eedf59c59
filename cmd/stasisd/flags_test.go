package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stasisd.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigFile(t *testing.T) {
	cmd := newCommand()
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--platform", "ptrace"}); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `# a comment
data = /srv/stasis
platform = kvm
no-store
host-path = /srv/a
host-path = /srv/b:rw

`)
	if err := applyConfig(fs, path); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"data":      "/srv/stasis",
		"platform":  "ptrace", // the command line wins
		"no-store":  "true",
		"host-path": "[/srv/a,/srv/b:rw]",
	} {
		if got := fs.Lookup(name).Value.String(); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestConfigFileErrors(t *testing.T) {
	for text, want := range map[string]string{
		"datum = /srv\n":             `:1: "datum" is not a stasisd setting`,
		"# ok\ndata\n":               ":2: data needs a value (data = VALUE)",
		"config = other.conf\n":      `"config" is not a stasisd setting`,
		"no-store = perhaps\n":       ":1: no-store: ",
		"deadline = suspend=1h\nx\n": `:2: "x" is not a stasisd setting`,
	} {
		err := applyConfig(newCommand().Flags(), writeConfig(t, text))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: error %v, want one containing %q", text, err, want)
		}
	}
	if err := applyConfig(newCommand().Flags(), filepath.Join(t.TempDir(), "none.conf")); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("missing config file: error %v, want one naming --config", err)
	}
}

// TestPackagedConfig checks the default config the Debian package installs:
// its settings, and every default it shows commented out, name settings
// stasisd takes, with values of their flags' types.
func TestPackagedConfig(t *testing.T) {
	text, err := os.ReadFile("../../packaging/stasisd.conf")
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`^#\s*([a-z][a-z-]*)(\s*=.*)?$`)
	var uncommented []string
	shown := 0
	for _, line := range strings.Split(string(text), "\n") {
		if m := setting.FindStringSubmatch(line); m != nil {
			line = m[1] + m[2]
			shown++
		}
		uncommented = append(uncommented, line)
	}
	if shown < 10 {
		t.Fatalf("the packaged config shows %d commented settings; the pattern no longer finds them", shown)
	}
	for name, path := range map[string]string{
		"as shipped":           "../../packaging/stasisd.conf",
		"with every line used": writeConfig(t, strings.Join(uncommented, "\n")),
	} {
		fs := newCommand().Flags()
		if err := applyConfig(fs, path); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if got := fs.Lookup("runsc").Value.String(); got != "/usr/lib/stasis/bin/runsc" {
			t.Errorf("%s: runsc = %q, want the packaged runsc", name, got)
		}
	}
}
