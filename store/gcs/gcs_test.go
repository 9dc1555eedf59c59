package gcs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/backendtest"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/gcstest"
)

// TestConformance runs the backend suite against a real GCS API server
// (fake-gcs-server), each case in a bucket of its own.
func TestConformance(t *testing.T) {
	srv := gcstest.Start(t)
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Endpoint)
	buckets := 0
	backendtest.Run(t, func(t *testing.T) store.Backend {
		buckets++
		be, err := location.Open(context.Background(), srv.Location(fmt.Sprintf("conformance-%d", buckets)), os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		return be
	})
}

// TestRepositoryOnGCS pushes a snapshot folder into a repository in a GCS
// bucket and pulls it back whole.
func TestRepositoryOnGCS(t *testing.T) {
	ctx := context.Background()
	srv := gcstest.Start(t)
	t.Setenv("STORAGE_EMULATOR_HOST", srv.Endpoint)
	be, err := location.FromEnv(ctx, srv.Location("repo"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Init(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "image"), 0o700); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 5<<20)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	if err := os.WriteFile(filepath.Join(src, "image", "pages.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Commit(ctx, src, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := archiver.Save(ctx, r, "gcs-actor", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, "gcs-actor", dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "image", "pages.img"))
	if err != nil || string(got) != string(data) {
		t.Fatalf("the pulled image differs: %v", err)
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}
