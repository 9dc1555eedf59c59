package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// counterImage is an image of the counter: /counter, its entrypoint, and
// serve, its cmd, running in /tmp.
func counterImage(t *testing.T) v1.Image {
	t.Helper()
	counter, _ := testactor.Binaries(t)
	bin, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []tar.Header{{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, {Name: "state/", Typeflag: tar.TypeDir, Mode: 0o755}} {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "counter", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(bin); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Entrypoint: []string{"/counter"}, Cmd: []string{"serve"}, WorkingDir: "/tmp", Env: []string{"FROM_IMAGE=1"}})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestTemplateFromImage: templates made from an OCI image layout and from a
// docker save tarball run the image's process (its counter counts); the
// unpacked bundle goes with its template, and a name taken is refused with
// the bundle left as it was.
func TestTemplateFromImage(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	img := counterImage(t)
	dir := t.TempDir()
	oci := filepath.Join(dir, "layout")
	p, err := layout.Write(oci, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(dir, "counter.tar")
	if err := tarball.WriteToFile(saved, name.MustParseReference("example.com/counter:1"), img); err != nil {
		t.Fatal(err)
	}
	for tpl, src := range map[string]string{"from-layout": oci, "from-tar": saved} {
		out := d.cli("template", "create", tpl, "--image", src, "--probe-cmd", "/counter,await,get")
		if !strings.Contains(out, "image "+src) {
			t.Fatalf("template create --image %s:\n%s", src, out)
		}
		id := tpl + "-1"
		d.run(tpl, id)
		if got := d.counter(id, "incr"); !strings.HasSuffix(got, " 1") {
			t.Fatalf("%s: counter %q", id, got)
		}
		res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: id, Args: []string{"/counter", "cat"}, Stdin: []byte("ok\n")})
		if err != nil || res.Stdout != "ok\n" {
			t.Fatalf("%s: exec: %+v %v", id, res, err)
		}
	}
	templates, err := d.api.ListTemplates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tpl api.Template
	for _, tt := range templates {
		if tt.Name == "from-layout" {
			tpl = tt
		}
	}
	if _, err := os.Stat(filepath.Join(tpl.Bundle, "rootfs", "counter")); err != nil {
		t.Fatalf("the unpacked bundle %s: %v", tpl.Bundle, err)
	}
	cmd := exec.Command(stasisCLI.path(t), "--socket", d.socket, "template", "create", "from-layout", "--image", saved)
	if out, err := cmd.CombinedOutput(); exitCode(err) != 4 {
		t.Fatalf("a second template of the name: exit %d\n%s", exitCode(err), out)
	}
	if _, err := os.Stat(filepath.Join(tpl.Bundle, "rootfs", "counter")); err != nil {
		t.Fatalf("the refused template touched the bundle: %v", err)
	}
	// A host folder mounted into an image's actors: read-only (the tests'
	// stasisd allows the temporary folder so), and a read-write one
	// refused by the host path policy.
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cli("template", "create", "mounted", "--image", oci, "--mount", shared+":/shared", "--probe-cmd", "/counter,await,get")
	d.run("mounted", "m1")
	res, err := d.api.Exec(context.Background(), api.ExecRequest{ID: "m1", Args: []string{"/counter", "waitfile", "/shared/hello"}})
	if err != nil || !strings.Contains(res.Stdout, "found /shared/hello") {
		t.Fatalf("the mount in the sandbox: %+v %v", res, err)
	}
	cmd = exec.Command(stasisCLI.path(t), "--socket", d.socket, "template", "create", "rw", "--image", oci, "--mount", shared+":/shared:rw")
	if out, err := cmd.CombinedOutput(); exitCode(err) != 12 || !strings.Contains(string(out), "read-write") {
		t.Fatalf("a read-write mount of a read-only folder: exit %d\n%s", exitCode(err), out)
	}

	d.cli("actor", "rm", "from-layout-1")
	d.cli("template", "rm", "from-layout")
	if _, err := os.Stat(tpl.Bundle); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the bundle of a deleted image template is left: %v", err)
	}
}
