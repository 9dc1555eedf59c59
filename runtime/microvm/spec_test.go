package microvm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
)

func writeBundle(t *testing.T, edit func(*specs.Spec)) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mem := int64(512 << 20)
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: []string{"/app", "serve"}, Env: []string{"A=1"}},
		VM:      &specs.VM{Kernel: specs.VMKernel{Path: "vmlinuz", InitRD: "initrd.img", Parameters: []string{"loglevel=4", "stasis.x=1"}}},
		Linux:   &specs.Linux{Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &mem}}},
		Annotations: map[string]string{
			AnnotationCPUs:    "2",
			AnnotationDevices: `[{"id":"gpu0","driver":"vfio-pci","props":{"host":"0000:3b:00.0"}}]`,
		},
	}
	if edit != nil {
		edit(spec)
	}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadSpec(t *testing.T) {
	dir := writeBundle(t, nil)
	s, err := LoadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(s)
	want := `{"kernel":"` + dir + `/vmlinuz","initrd":"` + dir + `/initrd.img","cmdline":"loglevel=4 stasis.x=1","memoryBytes":536870912,"cpus":2,` +
		`"devices":[{"id":"gpu0","driver":"vfio-pci","props":{"host":"0000:3b:00.0"}}],"process":{"args":["/app","serve"],"env":["A=1"]}}`
	if string(got) != want {
		t.Fatalf("spec\n%s\nwant\n%s", got, want)
	}
}

func TestLoadSpecRefusesBadBundles(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*specs.Spec)
		want string
	}{
		{"no vm section", func(s *specs.Spec) { s.VM = nil }, "vm section must name kernel.path and kernel.initrd"},
		{"no process", func(s *specs.Spec) { s.Process = nil }, "no process to start"},
		{"missing kernel", func(s *specs.Spec) { s.VM.Kernel.Path = "nope" }, "nope: no such file"},
		{"odd memory", func(s *specs.Spec) { m := int64(100<<20 + 1); s.Linux.Resources.Memory.Limit = &m }, "whole MiB, at least 64 MiB"},
		{"tiny memory", func(s *specs.Spec) { m := int64(16 << 20); s.Linux.Resources.Memory.Limit = &m }, "at least 64 MiB"},
		{"bad cpus", func(s *specs.Spec) { s.Annotations[AnnotationCPUs] = "0" }, "number of CPUs from 1 to 256"},
		{"bad devices", func(s *specs.Spec) { s.Annotations[AnnotationDevices] = "{" }, AnnotationDevices},
		{"device without id", func(s *specs.Spec) { s.Annotations[AnnotationDevices] = `[{"driver":"x"}]` }, "an id of its own"},
		{"device twice", func(s *specs.Spec) {
			s.Annotations[AnnotationDevices] = `[{"id":"a","driver":"x"},{"id":"a","driver":"y"}]`
		}, `(not "a")`},
		{"reserved id", func(s *specs.Spec) { s.Annotations[AnnotationDevices] = `[{"id":"stasis-vser","driver":"x"}]` }, `(not "stasis-vser")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadSpec(writeBundle(t, c.edit))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestDeviceOptionEscapesCommas(t *testing.T) {
	d := Device{ID: "gpu0", Driver: "vfio-pci", Props: map[string]string{"host": "0000:3b:00.0", "x-note": "a,b"}}
	if got, want := d.option(), "vfio-pci,id=gpu0,host=0000:3b:00.0,x-note=a,,b"; got != want {
		t.Fatalf("option %q, want %q", got, want)
	}
}
