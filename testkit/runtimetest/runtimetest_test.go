package runtimetest_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/runtime/conformance"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// TestConformance: the fake behaves as the real runtimes do, as far as the
// suite says.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness{
		Runtime: runtimetest.New(),
		Bundle: func(t *testing.T) string {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		Counter: func(verb string) []string { return []string{"/counter", "await", verb} },
	})
}
