package engine_test

import (
	"context"
	"errors"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// TestBootCleansUpWhatCannotBeRecorded: when the observer can record
// nothing more once the sandbox is up (a journal on a full disk), the boot
// fails and its cleanup still runs: no sandbox is left behind.
func TestBootCleansUpWhatCannotBeRecorded(t *testing.T) {
	rt := runtimetest.New()
	dir := t.TempDir()
	if err := bundle.Save(dir, &specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/counter"}}, Root: &specs.Root{Path: "rootfs"}}); err != nil {
		t.Fatal(err)
	}
	full := errors.New("database or disk is full")
	obs := engine.Observer{Before: func(s engine.Step) error {
		if s.Name == "boot" {
			return nil
		}
		return full
	}}
	eng := &engine.Engine{Runtime: rt}
	err := eng.Boot(context.Background(), engine.Actor{ID: "b1", Bundle: dir}, engine.BootOptions{Probe: engine.Probe{Command: []string{"/counter", "get"}}, Observer: obs})
	if !errors.Is(err, full) {
		t.Fatalf("boot: %v, want the observer's error", err)
	}
	if _, ok := rt.Sandbox("b1"); ok {
		t.Fatal("the sandbox of the failed boot was left behind")
	}
}
