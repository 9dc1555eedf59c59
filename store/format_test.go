package store_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/restic/chunker"

	"github.com/stasis-run/stasis/errdefs"
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

// restoresWhole restores snapshot name of r and checks that it is src again
// and that every chunk of r matches its hash.
func restoresWhole(t *testing.T, r *store.Repository, name, src string) {
	t.Helper()
	ctx := context.Background()
	dst := filepath.Join(t.TempDir(), "out")
	if err := archiver.Restore(ctx, r, name, dst, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, src, dst)
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFormat1RepositoryStillWorks(t *testing.T) {
	ctx := context.Background()
	r, _ := newFormat1Repo(t)
	src := makeFolder(t, 16, 2, 2)
	if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	restoresWhole(t, r, "s", src)
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
		{"newer format", `"version": 3`, `"version": 4`, "repository format 4, this build reads formats 1 to 3"},
		{"unknown chunker", `"fastcdc-v1.0.0"`, `"fastcdc-v9"`, `chunking algorithm "fastcdc-v9" is not known`},
		{"short key", `"key": "`, `"key": "AAAA`, "chunking key has"},
		{"absurd chunks", `"maxSize": 8388608`, `"maxSize": 1073741824`, "chunk sizes"},
		{"normal size", `"normalSize": 1048576`, `"normalSize": 1048577`, "not a power of two"},
		{"format 1 with chunking", `"version": 3`, `"version": 1`, "format 1 repository needs"},
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

// weightsFolder is a snapshot folder whose memory image is mib MiB of bf16
// weights drawn from N(0, 0.02), as a model server's is.
func weightsFolder(t *testing.T, mib int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(mib), 3))
	data := make([]byte, mib<<20)
	for i := 0; i < len(data); i += 2 {
		u := math.Float32bits(float32(r.NormFloat64() * 0.02))
		binary.LittleEndian.PutUint16(data[i:], uint16(u>>16))
	}
	return commitFolder(t, data)
}

// setFormat puts version in place of have in the config of the repository
// at root, as a build of that format would have written it.
func setFormat(t *testing.T, root string, have, version int) {
	t.Helper()
	path := filepath.Join(root, "config")
	cfg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	from := fmt.Sprintf(`"version": %d`, have)
	if !strings.Contains(string(cfg), from) {
		t.Fatalf("the config is not format %d: %s", have, cfg)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(cfg), from, fmt.Sprintf(`"version": %d`, version), 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWeightsStoredGrouped: a format 3 repository stores bf16 weights in
// about two thirds of their bytes and gives them back whole; a format 2
// one, which older builds also read, stores them with zstd as before.
func TestWeightsStoredGrouped(t *testing.T) {
	ctx := context.Background()
	src := weightsFolder(t, 24)
	for _, c := range []struct {
		version  int
		min, max float64 // stored bytes over the image's
	}{
		{3, 0.60, 0.72},
		{2, 0.98, 1.02},
	} {
		_, root := newRepo(t)
		setFormat(t, root, 3, c.version)
		r := openRepo(t, root)
		if _, err := archiver.Save(ctx, r, "s", src, archiver.Options{}); err != nil {
			t.Fatal(err)
		}
		du, err := r.DU(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ratio := float64(du.Stored) / float64(du.Logical)
		if ratio < c.min || ratio > c.max {
			t.Errorf("format %d: stored %d bytes for %d (%.3f), want %.2f-%.2f", c.version, du.Stored, du.Logical, ratio, c.min, c.max)
		}
		restoresWhole(t, r, "s", src)
	}
}

// TestUpgradeFormat2: a format 2 repository moved to format 3 in place
// keeps its snapshots whole and stores new weights grouped; a format 3
// one is left as it is, a format 1 one refused with what to do, and
// nothing is changed while another process holds a lock.
func TestUpgradeFormat2(t *testing.T) {
	ctx := context.Background()
	src := weightsFolder(t, 24)
	_, root := newRepo(t)
	cfgPath := filepath.Join(root, "config")
	setFormat(t, root, 3, 2)
	r := openRepo(t, root)
	if _, err := archiver.Save(ctx, r, "before", src, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	before, err := r.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Another process's lock: refused, the config unchanged.
	other := openRepo(t, root)
	unlock, err := other.Lock(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Upgrade(ctx); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("upgraded while a push held a lock: %v", err)
	}
	unlock()
	if cfg, _ := os.ReadFile(cfgPath); !strings.Contains(string(cfg), `"version": 2`) {
		t.Fatalf("a refused upgrade changed the config: %s", cfg)
	}

	up, err := r.Upgrade(ctx)
	if err != nil || up != (store.Upgrade{From: 2, To: 3}) {
		t.Fatalf("upgrade: %+v %v", up, err)
	}
	if cfg, _ := os.ReadFile(cfgPath); !strings.Contains(string(cfg), `"version": 3`) || !strings.Contains(string(cfg), `"chunking"`) {
		t.Fatalf("config after the upgrade: %s", cfg)
	}
	if up, err := r.Upgrade(ctx); err != nil || up != (store.Upgrade{From: 3, To: 3}) {
		t.Errorf("a second upgrade: %+v %v", up, err)
	}

	// Reopened: the old snapshot whole, new weights grouped (a chunk
	// shared with the old snapshot is not stored again, so these are new
	// weights).
	r = openRepo(t, root)
	restoresWhole(t, r, "before", src)
	src2 := weightsFolder(t, 25) // other values than src's
	if _, err := archiver.Save(ctx, r, "after", src2, archiver.Options{}); err != nil {
		t.Fatal(err)
	}
	after, err := r.DU(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ratio := float64(after.Stored-before.Stored) / float64(after.Logical-before.Logical); ratio < 0.60 || ratio > 0.72 {
		t.Errorf("new weights after the upgrade took %.3f of their bytes, want 0.60-0.72 (grouped)", ratio)
	}
	restoresWhole(t, r, "after", src2)

	// Format 1: refused, unchanged.
	r1, root1 := newFormat1Repo(t)
	raw, err := os.ReadFile(filepath.Join(root1, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Upgrade(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "make a new repository") {
		t.Errorf("format 1 upgrade: %v", err)
	}
	if after, _ := os.ReadFile(filepath.Join(root1, "config")); string(after) != string(raw) {
		t.Errorf("a refused format 1 upgrade changed the config: %s", after)
	}
}
