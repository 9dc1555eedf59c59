package transfer_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/mem"
	"github.com/stasis-run/stasis/transfer"
)

// These tests push and fetch snapshot folders through a repository in
// memory (store/mem): no disk store, no runtime, no root.

func memRepo(t *testing.T) *store.Repository {
	t.Helper()
	repo, err := store.Init(context.Background(), mem.New(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// folder commits a snapshot folder of actor with an image of the given
// bytes.
func folder(t *testing.T, actor string, image []byte) (string, *snapshot.Manifest) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snap")
	if err := os.MkdirAll(filepath.Join(dir, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image", "checkpoint.img"), image, 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestPushThenFetchGivesTheFolderBack(t *testing.T) {
	ctx := context.Background()
	repo := memRepo(t)
	image := bytes.Repeat([]byte("stasis "), 300_000)
	dir, m := folder(t, "a1", image)
	var steps []string
	obs := engine.Observer{After: func(s engine.Step) { steps = append(steps, s.Name+": "+s.Message+s.Err) }}
	recorded := false
	to := transfer.Stored{Repo: repo, Name: "a1.snap-000000000001"}
	if err := transfer.Push(ctx, obs, "a1", "suspend", dir, m, to, func() error { recorded = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !recorded || len(steps) != 1 || !strings.Contains(steps[0], "stored as a1.snap-000000000001 in mem:") {
		t.Fatalf("push: recorded %v, steps %q", recorded, steps)
	}
	// A second push under the name is refused before anything moves.
	if err := transfer.Push(ctx, obs, "a1", "suspend", dir, m, to, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("a second push under the same name: %v", err)
	}

	into := filepath.Join(t.TempDir(), "copy")
	var seen *snapshot.Manifest
	p, err := transfer.Fetch(ctx, to, into, func(m *snapshot.Manifest) error { seen = m; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if seen == nil || seen.Actor != "a1" || p.Bytes != int64(len(image)) {
		t.Fatalf("fetch: manifest %+v, %d bytes", seen, p.Bytes)
	}
	got, err := os.ReadFile(filepath.Join(into, "image", "checkpoint.img"))
	if err != nil || !bytes.Equal(got, image) {
		t.Fatalf("the fetched image: %d bytes, %v; want the pushed %d", len(got), err, len(image))
	}
	if _, err := snapshot.Verify(ctx, into); err != nil {
		t.Fatalf("the fetched folder does not verify: %v", err)
	}
}

func TestAFetchTheCheckRefusesMovesNothing(t *testing.T) {
	ctx := context.Background()
	repo := memRepo(t)
	dir, m := folder(t, "a1", bytes.Repeat([]byte{7}, 1<<20))
	to := transfer.Stored{Repo: repo, Name: "a1.snap-000000000002"}
	if err := transfer.Push(ctx, engine.Observer{}, "a1", "suspend", dir, m, to, nil); err != nil {
		t.Fatal(err)
	}
	refused := errdefs.Mark(errors.New("this node cannot restore it"), errdefs.ErrFailedPrecondition)
	into := filepath.Join(t.TempDir(), "copy")
	if _, err := transfer.Fetch(ctx, to, into, func(*snapshot.Manifest) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("a refused fetch: %v", err)
	}
	if _, err := os.Stat(into); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused fetch left %s: %v", into, err)
	}
	if _, err := transfer.Fetch(ctx, transfer.Stored{Repo: repo, Name: "a1.snap-000000000009"}, into, func(*snapshot.Manifest) error { return nil }); !errors.Is(err, store.ErrNotExist) {
		t.Fatalf("a fetch of a name not stored: %v", err)
	}
}
