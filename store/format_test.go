package store_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restic/chunker"

	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/archiver"
	"github.com/stasis-run/stasis/store/local"
)

// newFormat1Repo makes a repository as builds before format 2 did: Rabin
// chunks with the repository's own random polynomial.
func newFormat1Repo(t testing.TB) (*store.Repository, string) {
	t.Helper()
	root := t.TempDir()
	pol, err := chunker.RandomPolynomial()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := json.Marshal(map[string]any{"version": 1, "id": strings.Repeat("ab", 32), "chunkerPolynomial": pol, "packSize": 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "config"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	be, err := local.New(root)
	if err != nil {
		t.Fatal(err)
	}
	r, err := store.Open(context.Background(), be)
	if err != nil {
		t.Fatalf("open a format 1 repository: %v", err)
	}
	return r, root
}

func TestFormat1RepositoryStillWorks(t *testing.T) {
	ctx := context.Background()
	r, _ := newFormat1Repo(t)
	src := makeFolder(t, 16, 2, 2)
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, "s", dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigsAreRefused(t *testing.T) {
	ctx := context.Background()
	_, root := newRepo(t)
	path := filepath.Join(root, "config")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, old, new, want string }{
		{"newer format", `"version": 2`, `"version": 3`, "repository format 3, this build reads formats 1 and 2"},
		{"unknown chunker", `"fastcdc-v1.0.0"`, `"fastcdc-v9"`, `chunking algorithm "fastcdc-v9" is not known`},
		{"short key", `"key": "`, `"key": "AAAA`, "chunking key has"},
		{"absurd chunks", `"maxSize": 8388608`, `"maxSize": 1073741824`, "chunk sizes"},
		{"normal size", `"normalSize": 1048576`, `"normalSize": 1048577`, "not a power of two"},
		{"format 1 with chunking", `"version": 2`, `"version": 1`, "format 1 repository needs"},
		{"pack size", `"packSize": 16777216`, `"packSize": 0`, "pack size 0"},
		{"truncated", `"packSize"`, `"`, "not valid JSON"},
	} {
		bad := strings.Replace(string(good), c.old, c.new, 1)
		if c.name == "truncated" {
			bad = bad[:strings.Index(bad, c.new)+1]
		}
		if bad == string(good) {
			t.Fatalf("%s: the edit did not apply to %s", c.name, good)
		}
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		be, err := local.New(root)
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Open(ctx, be)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), root) {
			t.Errorf("%s: got %v, want an error naming the store and %q", c.name, err, c.want)
		}
	}
}
