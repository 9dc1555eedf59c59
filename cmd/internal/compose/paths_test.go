package compose

import (
	"path/filepath"
	"testing"
)

// TestAbsolutePaths: folders and a socket given relative are taken from the
// working folder; absolute ones and a store at a URL are left as given.
func TestAbsolutePaths(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	o := Options{DataDir: "data", Socket: "run/s.sock", Repo: "store"}
	o.Runsc.Root = "/var/lib/stasis/runsc"
	if err := o.AbsolutePaths(); err != nil {
		t.Fatal(err)
	}
	if o.DataDir != filepath.Join(dir, "data") || o.Socket != filepath.Join(dir, "run/s.sock") || o.Repo != filepath.Join(dir, "store") || o.Runsc.Root != "/var/lib/stasis/runsc" {
		t.Fatalf("%+v", o)
	}
	if o.TemplatesDir() != filepath.Join(dir, "data", "templates") {
		t.Fatalf("templates %s", o.TemplatesDir())
	}
	s3 := Options{Repo: "s3://bucket/prefix?endpoint=127.0.0.1:9000"}
	if err := s3.AbsolutePaths(); err != nil || s3.Repo != "s3://bucket/prefix?endpoint=127.0.0.1:9000" {
		t.Fatalf("%+v %v", s3, err)
	}
}
