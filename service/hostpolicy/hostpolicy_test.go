package hostpolicy_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime/microvm"
	"github.com/stasis-run/stasis/service/hostpolicy"
)

func TestParsePath(t *testing.T) {
	for in, want := range map[string]hostpolicy.Path{"/srv": {Path: "/srv"}, "/srv:ro": {Path: "/srv"}, "/srv:rw": {Path: "/srv", ReadWrite: true}} {
		got, err := hostpolicy.ParsePath(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"srv", "/srv/../etc", "/srv:rx", ""} {
		if _, err := hostpolicy.ParsePath(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want invalid_argument", bad, err)
		}
	}
}

func TestAllows(t *testing.T) {
	root := t.TempDir()
	ro, rw, data, other := filepath.Join(root, "ro"), filepath.Join(root, "ro", "rw"), filepath.Join(root, "data"), filepath.Join(root, "other")
	templates := filepath.Join(data, "templates")
	for _, d := range []string{rw, templates, filepath.Join(data, "actors"), other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(ro, "to-data")
	if err := os.Symlink(data, link); err != nil {
		t.Fatal(err)
	}
	p := hostpolicy.Policy{Paths: []hostpolicy.Path{{Path: ro}, {Path: rw, ReadWrite: true}, {Path: templates}}, DataDir: data, TemplatesDir: templates}
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		rw   bool
		want error
		says string
	}{
		{ro, false, nil, ""},
		{rw, true, nil, ""},
		{templates, false, nil, ""},
		{ro, true, hostpolicy.ErrForbidden, "read-only"},
		{other, false, hostpolicy.ErrForbidden, "--host-path " + other},
		{filepath.Join(data, "actors"), false, hostpolicy.ErrForbidden, "data folder"},
		{link, false, hostpolicy.ErrForbidden, "symlinks resolved"},
		{"/", false, hostpolicy.ErrForbidden, "--allow-host-root"},
		{"relative", false, hostpolicy.ErrForbidden, "absolute"},
		{filepath.Join(ro, "missing"), false, errdefs.ErrNotFound, "does not exist"},
		// Outside: refused alike whether it exists, naming no lstat.
		{filepath.Join(other, "missing"), false, hostpolicy.ErrForbidden, "is not in a folder templates may use (" + ro},
	} {
		err := p.Allows("rootfs", c.path, c.rw)
		if err != nil && strings.Contains(err.Error(), "lstat") {
			t.Errorf("%s: %v: the system call's words", c.path, err)
		}
		if c.want == nil && err != nil || c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says)) {
			t.Errorf("%s (rw %v): %v, want %v saying %q", c.path, c.rw, err, c.want, c.says)
		}
	}
}

func TestCheckSpec(t *testing.T) {
	dir := t.TempDir()
	p := hostpolicy.Policy{Paths: []hostpolicy.Path{{Path: dir}}}
	ok := &specs.Spec{Root: &specs.Root{Path: "rootfs"}}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckSpec(ok, dir); err != nil {
		t.Fatalf("a bundle within the policy: %v", err)
	}
	for name, spec := range map[string]*specs.Spec{
		"hooks":   {Hooks: &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/bin/true"}}}},
		"devices": {Linux: &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/kvm"}}}},
		"bind":    {Mounts: []specs.Mount{{Destination: "/host", Source: "/etc", Type: "bind"}}},
		"device":  {Annotations: map[string]string{microvm.AnnotationDevices: `[{"id":"d","driver":"virtio-net-pci"}]`}},
	} {
		if err := p.CheckSpec(spec, dir); !errors.Is(err, hostpolicy.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", name, err)
		}
	}
}

func TestCheckVMDevices(t *testing.T) {
	if err := hostpolicy.CheckVMDevices([]api.Device{{ID: "gpu0", Driver: "vfio-pci", Props: map[string]string{"host": "0000:3b:00.0"}}}); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string][]api.Device{
		"driver":   {{ID: "n", Driver: "virtio-net-pci"}},
		"property": {{ID: "r", Driver: "virtio-rng-pci", Props: map[string]string{"filename": "/dev/sda"}}},
		"address":  {{ID: "g", Driver: "vfio-pci", Props: map[string]string{"host": "../../dev"}}},
	} {
		if err := hostpolicy.CheckVMDevices(d); !errors.Is(err, hostpolicy.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", name, err)
		}
	}
	for name, d := range map[string][]api.Device{
		"twice":   {{ID: "a", Driver: "virtio-rng-pci"}, {ID: "a", Driver: "virtio-rng-pci"}},
		"no host": {{ID: "g", Driver: "vfio-pci"}},
	} {
		if err := hostpolicy.CheckVMDevices(d); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
}
