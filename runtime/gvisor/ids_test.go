package gvisor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestIDsThatBeginOthers: runsc finds a container by the beginning of its
// id. With only p.1 there, every command for p (state, checkpoint, pause,
// exec, stop, delete) says that no p is there and leaves p.1 running, as
// runsc alone would have run it on p.1; no container p, nor p.1.2, is
// made beside p.1, before runsc is asked; once p.1 is gone, p is.
func TestIDsThatBeginOthers(t *testing.T) {
	ctx := context.Background()
	r := newRunsc(t, Config{Network: "none"})
	dir := testactor.Bundle(t, t.TempDir(), testactor.Options{})
	pid := startSandbox(t, r, dir, "p.1")
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, runtime.ErrNotFound) || !strings.Contains(err.Error(), "p.1") {
			t.Fatalf("%s of p beside p.1: %v; want not found, naming p.1", what, err)
		}
	}
	_, err := r.State(ctx, "p")
	notFound("state", err)
	notFound("checkpoint", r.Checkpoint(ctx, "p", runtime.CheckpointOptions{ImageDir: filepath.Join(t.TempDir(), "image")}))
	notFound("pause", r.Pause(ctx, "p"))
	_, err = r.Exec(ctx, "p", runtime.Process{Args: []string{"/counter", "get"}})
	notFound("exec", err)
	notFound("stop", r.Stop(ctx, "p"))
	if err := r.Delete(ctx, "p"); err != nil {
		t.Fatalf("delete of p beside p.1: %v; want none to delete", err)
	}
	if st, err := r.State(ctx, "p.1"); err != nil || st.Status != runtime.StatusRunning || st.PID != pid {
		t.Fatalf("p.1 after the commands for p: %+v %v", st, err)
	}
	for _, id := range []string{"p", "p.1.2"} {
		err := r.Create(ctx, id, dir, runtime.CreateOptions{})
		if errdefs.Code(err) != "failed_precondition" || !strings.Contains(err.Error(), "p.1") {
			t.Fatalf("create of %s beside p.1: %v; want refused, naming p.1", id, err)
		}
		if _, ok := r.containers()[id]; ok {
			t.Fatalf("the refused create left container %s", id)
		}
		if err := r.Restore(ctx, id, runtime.RestoreOptions{Bundle: dir, ImageDir: t.TempDir()}); errdefs.Code(err) != "failed_precondition" {
			t.Fatalf("restore into %s beside p.1: %v; want refused", id, err)
		}
	}
	if err := r.Stop(ctx, "p.1"); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, "p.1"); err != nil {
		t.Fatal(err)
	}
	startSandbox(t, r, dir, "p")
	if got, err := r.Exec(ctx, "p", runtime.Process{Args: []string{"/counter", "get"}}); err != nil || got.ExitCode != 0 {
		t.Fatalf("exec in p, made once p.1 was gone: %+v %v", got, err)
	}
}
