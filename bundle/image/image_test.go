package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/errdefs"
)

type entry struct {
	hdr  tar.Header
	body string
}

// layer is a layer of these entries.
func layer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		e.hdr.Size = int64(len(e.body))
		if e.hdr.Mode == 0 {
			e.hdr.Mode = 0o644
		}
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func image(t *testing.T, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	return img
}

// ociLayout writes img as an OCI image layout folder.
func ociLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

func spec(t *testing.T, bundle string) specs.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestUnpack: an image's layers, the later over the earlier (a whiteout
// removes), in the bundle's rootfs; its config the process; from an OCI
// layout and from a docker save tarball alike.
func TestUnpack(t *testing.T) {
	base := layer(t,
		entry{hdr: tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}},
		entry{hdr: tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg}, body: "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/app:/bin/sh\n"},
		entry{hdr: tar.Header{Name: "app/run", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 1000, Gid: 1001}, body: "#!/bin/sh\n"},
		entry{hdr: tar.Header{Name: "app/old", Typeflag: tar.TypeReg}, body: "gone in the next layer"},
		entry{hdr: tar.Header{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "/usr/bin"}},
		entry{hdr: tar.Header{Name: "app/same", Typeflag: tar.TypeLink, Linkname: "app/run"}},
	)
	top := layer(t,
		entry{hdr: tar.Header{Name: "app/.wh.old", Typeflag: tar.TypeReg}},
		entry{hdr: tar.Header{Name: "app/new", Typeflag: tar.TypeReg}, body: "new"},
	)
	img := image(t, v1.Config{Entrypoint: []string{"/app/run"}, Cmd: []string{"--port", "8000"}, Env: []string{"FOO=1"}, WorkingDir: "/app", User: "app"}, base, top)

	tarPath := filepath.Join(t.TempDir(), "saved.tar")
	if err := tarball.WriteToFile(tarPath, name.MustParseReference("example.com/app:1"), img); err != nil {
		t.Fatal(err)
	}
	for what, src := range map[string]string{"layout": ociLayout(t, img), "docker save": tarPath} {
		dst := filepath.Join(t.TempDir(), "bundle")
		p, err := Unpack(context.Background(), src, dst, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if strings.Join(p.Args, " ") != "/app/run --port 8000" {
			t.Errorf("%s: args %q", what, p.Args)
		}
		s := spec(t, dst)
		if got := s.Process; strings.Join(got.Args, " ") != "/app/run --port 8000" || got.Cwd != "/app" || got.User.UID != 1000 || got.User.GID != 1001 ||
			!strings.Contains(strings.Join(got.Env, " "), "PATH=") || !strings.Contains(strings.Join(got.Env, " "), "FOO=1") {
			t.Errorf("%s: process %+v", what, got)
		}
		if s.Root.Path != "rootfs" {
			t.Errorf("%s: root %q", what, s.Root.Path)
		}
		rootfs := filepath.Join(dst, "rootfs")
		if _, err := os.Stat(filepath.Join(rootfs, "app", "old")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the whiteout left app/old: %v", what, err)
		}
		if b, err := os.ReadFile(filepath.Join(rootfs, "app", "new")); err != nil || string(b) != "new" {
			t.Errorf("%s: app/new: %q %v", what, b, err)
		}
		st, err := os.Stat(filepath.Join(rootfs, "app", "run"))
		if err != nil || st.Mode()&os.ModeSetuid == 0 || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: app/run's mode %v, %v", what, st.Mode(), err)
		}
		if link, err := os.Readlink(filepath.Join(rootfs, "bin")); err != nil || link != "/usr/bin" {
			t.Errorf("%s: bin -> %q, %v", what, link, err)
		}
		if same, err := os.Stat(filepath.Join(rootfs, "app", "same")); err != nil || !os.SameFile(st, same) {
			t.Errorf("%s: the hard link is not app/run: %v", what, err)
		}
	}

	// Args replace the cmd, not the entrypoint, as docker run's do.
	dst := filepath.Join(t.TempDir(), "bundle")
	if p, err := Unpack(context.Background(), tarPath, dst, []string{"--port", "9000"}); err != nil || strings.Join(p.Args, " ") != "/app/run --port 9000" {
		t.Errorf("with args: %q %v", p.Args, err)
	}
}

// TestUnpackRefuses: a layer that reaches out of the rootfs through a
// link, an unknown user, an image with nothing to run, and what is not an
// image are refused, and nothing is left.
func TestUnpackRefuses(t *testing.T) {
	outside := t.TempDir()
	// A link out in one layer, a file through it in the next (within one
	// layer the flattening drops what lies under a link).
	link := layer(t, entry{hdr: tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside}})
	through := layer(t, entry{hdr: tar.Header{Name: "out/planted", Typeflag: tar.TypeReg}, body: "x"})
	plain := layer(t, entry{hdr: tar.Header{Name: "run", Typeflag: tar.TypeReg, Mode: 0o755}, body: "x"})
	notImage := filepath.Join(t.TempDir(), "not-an-image")
	if err := os.WriteFile(notImage, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		src  string
		want error
		says string
	}{
		{"a link out of the rootfs", ociLayout(t, image(t, v1.Config{Cmd: []string{"/run"}}, link, through)), nil, "out"},
		{"an unknown user", ociLayout(t, image(t, v1.Config{Cmd: []string{"/run"}, User: "nobody"}, plain)), errdefs.ErrInvalidArgument, `user "nobody"`},
		{"nothing to run", ociLayout(t, image(t, v1.Config{}, plain)), errdefs.ErrInvalidArgument, "no entrypoint or cmd"},
		{"not an image", notImage, errdefs.ErrInvalidArgument, "not a docker save"},
		{"no such path", filepath.Join(outside, "missing"), errdefs.ErrNotFound, "missing"},
	} {
		dst := filepath.Join(t.TempDir(), "bundle")
		_, err := Unpack(context.Background(), c.src, dst, nil)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %v saying %q", c.what, err, c.want, c.says)
		}
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the bundle folder was left: %v", c.what, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a layer wrote outside the rootfs: %v", err)
	}
}
