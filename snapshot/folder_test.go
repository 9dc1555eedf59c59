package snapshot_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/snapshot"
)

func makeSnapshot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "image"), 0o700))
	big := make([]byte, snapshot.BlockSize+12345)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(t, os.WriteFile(filepath.Join(dir, "image", "pages.img"), big, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "image", "checkpoint.img"), []byte("state"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	_, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeFull, Actor: "a1", Runtime: snapshot.Runtime{Name: "gvisor", Version: "v0"}})
	must(t, err)
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want an error containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestCommitThenVerify(t *testing.T) {
	dir := makeSnapshot(t)
	m, err := snapshot.Verify(context.Background(), dir)
	must(t, err)
	if len(m.Files) != 3 || m.Files[1].Path != "image/checkpoint.img" {
		t.Fatalf("files %+v", m.Files)
	}
	pages := m.Files[2]
	if pages.Path != "image/pages.img" || pages.Size != snapshot.BlockSize+12345 || len(pages.Blocks) != 2 || pages.Mode != 0o600 {
		t.Errorf("pages entry %+v", pages)
	}
	if len(m.Files[0].Blocks) != 0 {
		t.Errorf("an empty file has %d blocks", len(m.Files[0].Blocks))
	}
}

func TestVerifyFindsCorruptByte(t *testing.T) {
	dir := makeSnapshot(t)
	f, err := os.OpenFile(filepath.Join(dir, "image", "pages.img"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte{0xff}, snapshot.BlockSize+5)
	must(t, err)
	f.Close()
	_, err = snapshot.Verify(context.Background(), dir)
	wantErr(t, err, "image/pages.img", "67108864 to", "corrupt", dir)
}

func TestVerifyFindsTruncation(t *testing.T) {
	dir := makeSnapshot(t)
	must(t, os.Truncate(filepath.Join(dir, "image", "pages.img"), 1000))
	_, err := snapshot.Verify(context.Background(), dir)
	wantErr(t, err, "image/pages.img", "1000 bytes", "truncated")
}

// TestCheckReadsNoBytes: Check finds a truncated, missing or extra file
// without reading the files, so it passes a same-size corruption that
// Verify finds.
func TestCheckReadsNoBytes(t *testing.T) {
	dir := makeSnapshot(t)
	if _, err := snapshot.Check(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "image", "pages.img"), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte{0xff}, 5)
	must(t, err)
	f.Close()
	if _, err := snapshot.Check(context.Background(), dir); err != nil {
		t.Fatalf("Check read the bytes: %v", err)
	}
	must(t, os.Truncate(filepath.Join(dir, "image", "pages.img"), 1000))
	_, err = snapshot.Check(context.Background(), dir)
	wantErr(t, err, "image/pages.img", "1000 bytes", "truncated")
	must(t, os.WriteFile(filepath.Join(dir, "image", "stray"), []byte("x"), 0o600))
	_, err = snapshot.Check(context.Background(), dir)
	wantErr(t, err, "image/stray", "not in the manifest")
}

func TestVerifyFindsExtraAndMissingFiles(t *testing.T) {
	dir := makeSnapshot(t)
	must(t, os.WriteFile(filepath.Join(dir, "image", "stray"), []byte("x"), 0o600))
	_, err := snapshot.Verify(context.Background(), dir)
	wantErr(t, err, "image/stray", "not in the manifest")

	dir = makeSnapshot(t)
	must(t, os.Remove(filepath.Join(dir, "image", "checkpoint.img")))
	_, err = snapshot.Verify(context.Background(), dir)
	wantErr(t, err, "image/checkpoint.img", "missing")
}

func TestNoManifestIsIncomplete(t *testing.T) {
	dir := t.TempDir()
	_, err := snapshot.Verify(context.Background(), dir)
	if !errors.Is(err, snapshot.ErrNoManifest) {
		t.Fatalf("got %v", err)
	}
}

func rewriteManifest(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, snapshot.ManifestName)
	data, err := os.ReadFile(path)
	must(t, err)
	var m map[string]any
	must(t, json.Unmarshal(data, &m))
	edit(m)
	data, err = json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(path, data, 0o600))
}

func TestLoadRefusesBadManifests(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		want []string
	}{
		{"unknown version", func(m map[string]any) { m["formatVersion"] = 99 }, []string{"format version 99"}},
		{"unknown scope", func(m map[string]any) { m["scope"] = "Partial" }, []string{"unknown scope"}},
		{"parent path", func(m map[string]any) { m["files"].([]any)[0].(map[string]any)["path"] = "../../etc/passwd" }, []string{"escapes"}},
		{"absolute path", func(m map[string]any) { m["files"].([]any)[0].(map[string]any)["path"] = "/etc/passwd" }, []string{"absolute"}},
		{"unclean path", func(m map[string]any) { m["files"].([]any)[0].(map[string]any)["path"] = "image/../../x" }, []string{"not clean"}},
		{"absurd size", func(m map[string]any) { m["files"].([]any)[0].(map[string]any)["size"] = float64(1 << 62) }, []string{"absurd size"}},
		{"block count", func(m map[string]any) { m["files"].([]any)[2].(map[string]any)["sha256Blocks"] = []any{"00"} }, []string{"1 block digests"}},
		{"relative open file", func(m map[string]any) { m["openFiles"] = []any{"usr/lib/x.so"} }, []string{`open file "usr/lib/x.so"`, "absolute, clean"}},
		{"unclean open file", func(m map[string]any) { m["openFiles"] = []any{"/usr/../../etc/shadow"} }, []string{"absolute, clean"}},
		{"too many open files", func(m map[string]any) {
			many := make([]any, snapshot.MaxOpenFiles+1)
			for i := range many {
				many[i] = fmt.Sprintf("/f%d", i)
			}
			m["openFiles"] = many
		}, []string{"65537 open files"}},
		{"first read of a relative path", func(m map[string]any) {
			m["firstReads"] = []any{map[string]any{"path": "../etc/shadow", "offset": 0, "length": 4096}}
		}, []string{`first read of "../etc/shadow"`, "absolute, clean"}},
		{"negative first read", func(m map[string]any) {
			m["firstReads"] = []any{map[string]any{"path": "/lib/a.so", "offset": -1, "length": 4096}}
		}, []string{"absurd stretch"}},
		{"empty first read", func(m map[string]any) {
			m["firstReads"] = []any{map[string]any{"path": "/lib/a.so", "offset": 0, "length": 0}}
		}, []string{"absurd stretch"}},
		{"overlapping first reads", func(m map[string]any) {
			m["firstReads"] = []any{map[string]any{"path": "/lib/a.so", "offset": 0, "length": 8192}, map[string]any{"path": "/lib/a.so", "offset": 4096, "length": 4096}}
		}, []string{"out of order or overlapping"}},
		{"first reads of too many bytes", func(m map[string]any) {
			m["firstReads"] = []any{map[string]any{"path": "/lib/a.so", "offset": 0, "length": snapshot.MaxFirstReadBytes}, map[string]any{"path": "/lib/b.so", "offset": 0, "length": 1}}
		}, []string{"first reads add up to more than 1073741824 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makeSnapshot(t)
			rewriteManifest(t, dir, c.edit)
			_, err := snapshot.Load(dir)
			wantErr(t, err, c.want...)
		})
	}
	// First reads in order and apart: kept as written.
	dir := makeSnapshot(t)
	reads := []snapshot.FileRange{{Path: "/lib/a.so", Offset: 0, Length: 4096}, {Path: "/lib/a.so", Offset: 8192, Length: 100}, {Path: "/lib/b.so", Offset: 0, Length: 1}}
	rewriteManifest(t, dir, func(m map[string]any) {
		m["openFiles"] = []any{"/lib/a.so", "/lib/b.so"}
		m["firstReads"] = reads
	})
	m, err := snapshot.Load(dir)
	must(t, err)
	if !slices.Equal(m.FirstReads, reads) {
		t.Fatalf("first reads loaded as %v, want %v", m.FirstReads, reads)
	}
	dir = makeSnapshot(t)
	data, err := os.ReadFile(filepath.Join(dir, snapshot.ManifestName))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, snapshot.ManifestName), data[:len(data)/2], 0o600))
	_, err = snapshot.Load(dir)
	wantErr(t, err, "truncated or corrupt")
}

func TestSymlinksAreRefused(t *testing.T) {
	dir := t.TempDir()
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))
	_, err := snapshot.Commit(context.Background(), dir, snapshot.Manifest{Scope: snapshot.ScopeData})
	wantErr(t, err, "link", "not a regular file")
	if _, statErr := os.Stat(filepath.Join(dir, snapshot.ManifestName)); statErr == nil {
		t.Error("a manifest was written for a refused folder")
	}

	dir = makeSnapshot(t)
	must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "image", "evil")))
	_, err = snapshot.Verify(context.Background(), dir)
	wantErr(t, err, "evil", "not a regular file")
}
