package staging_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service/internal/staging"
	"github.com/stasis-run/stasis/snapshot"
)

// writeCopy writes a whole snapshot folder of size bytes into dir.
func writeCopy(t *testing.T, dir string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image", "checkpoint.img"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a1"}); err != nil {
		t.Fatal(err)
	}
}

func none(context.Context, string) (string, func(), bool) { return "", nil, false }

// pullOf writes a copy of size bytes, after the budget makes room for it,
// as a pull does.
func pullOf(t *testing.T, c *staging.Copies, size int, pulls *atomic.Int32) func(context.Context, string) error {
	return func(_ context.Context, into string) error {
		pulls.Add(1)
		if err := c.MakeRoom(int64(size)); err != nil {
			return err
		}
		writeCopy(t, into, size)
		return nil
	}
}

func TestStageSharesOnePullAndKeepsToTheBudget(t *testing.T) {
	c, err := staging.New(t.TempDir(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if _, err := c.Stage(context.Background(), "a1.snap-000000000001", none, pullOf(t, c, 1000, &pulls)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if pulls.Load() < 1 || pulls.Load() > 5 {
		t.Fatalf("%d pulls", pulls.Load())
	}
	// A second copy fits; a third of 2000 bytes makes room by removing the
	// copy used longest ago, unless it is in use.
	if _, err := c.Stage(context.Background(), "a1.snap-000000000002", none, pullOf(t, c, 1000, &pulls)); err != nil {
		t.Fatal(err)
	}
	_, release, ok := c.Use("a1.snap-000000000002")
	if !ok {
		t.Fatal("the second copy cannot be used")
	}
	if _, err := c.Stage(context.Background(), "a1.snap-000000000003", none, pullOf(t, c, 2000, &pulls)); err != nil {
		t.Fatal(err)
	}
	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, s := range list {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, ","); got != "a1.snap-000000000002,a1.snap-000000000003" {
		t.Fatalf("copies %s: want the one in use kept and the oldest removed", got)
	}
	// 2500 bytes do not fit beside the second while it is in use.
	if _, err := c.Stage(context.Background(), "a1.snap-000000000004", none, pullOf(t, c, 2500, &pulls)); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("got %v, want resource_exhausted naming the copies in use", err)
	}
	release()
	if _, err := c.Stage(context.Background(), "a1.snap-000000000005", none, pullOf(t, c, 4000, &pulls)); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "more than the whole budget") {
		t.Fatalf("got %v, want a refusal naming the budget", err)
	}
}

func TestStageRefusals(t *testing.T) {
	off, err := staging.New(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	if _, err := off.Stage(context.Background(), "a1.snap-000000000001", none, pullOf(t, off, 10, &pulls)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("staging off: %v", err)
	}
	c, err := staging.New(t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stage(context.Background(), "../escape", none, pullOf(t, c, 10, &pulls)); err == nil {
		t.Fatal("a name that leaves the folder was staged")
	}
	if pulls.Load() != 0 {
		t.Fatalf("%d pulls for refused names", pulls.Load())
	}
	// A copy found elsewhere on the node is answered without a pull.
	here := t.TempDir()
	writeCopy(t, here, 10)
	got, err := c.Stage(context.Background(), "a1.snap-000000000001", func(context.Context, string) (string, func(), bool) { return here, func() {}, true }, pullOf(t, c, 10, &pulls))
	if err != nil || !got.Already || got.Dir != here || pulls.Load() != 0 {
		t.Fatalf("got %+v, %v, %d pulls", got, err, pulls.Load())
	}
}

func TestAFailedPullLeavesNothing(t *testing.T) {
	data := t.TempDir()
	c, err := staging.New(data, 1000)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Stage(context.Background(), "a1.snap-000000000001", none, func(_ context.Context, into string) error {
		writeCopy(t, into, 10)
		return errors.New("the store broke off")
	})
	if err == nil {
		t.Fatal("a failed pull staged a copy")
	}
	for _, d := range []string{"staged", "staging"} {
		entries, err := os.ReadDir(filepath.Join(data, d))
		if err != nil || len(entries) != 0 {
			t.Fatalf("%s holds %d entries (%v) after a failed pull", d, len(entries), err)
		}
	}
}
