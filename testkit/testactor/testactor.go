// Package testactor builds the actors the integration tests run in real
// runsc sandboxes: a counter that keeps its state in memory (see
// testactor/counter), in a bundle whose rootfs holds nothing else, with
// optional durable folders and a stand-in CUDA helper.
package testactor

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
)

// binaries are built once per test binary, into a folder that Main removes
// after the tests.
var binaries struct {
	once            sync.Once
	dir             string
	counter, helper string
	memholder       string
	err             error
}

// Main runs a package's tests (its TestMain calls it), then each of after
// and the removal of what Binaries built, and exits with the tests' code:
// a test binary leaves nothing in the temporary folder.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if binaries.dir != "" {
		os.RemoveAll(binaries.dir)
	}
	os.Exit(code)
}

// Binaries builds the counter and the fake helper as static binaries.
func Binaries(t testing.TB) (counter, helper string) {
	t.Helper()
	binaries.once.Do(func() {
		binaries.dir, binaries.err = os.MkdirTemp("", "stasis-testactor-")
		if binaries.err != nil {
			return
		}
		for _, b := range []struct {
			pkg string
			out *string
		}{
			{"github.com/stasis-run/stasis/testkit/testactor/counter", &binaries.counter},
			{"github.com/stasis-run/stasis/testkit/testactor/fakehelper", &binaries.helper},
			{"github.com/stasis-run/stasis/testkit/testactor/memholder", &binaries.memholder},
		} {
			*b.out = filepath.Join(binaries.dir, filepath.Base(b.pkg))
			cmd := exec.Command("go", "build", "-o", *b.out, b.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binaries.err = &buildError{b.pkg, string(out), err}
				return
			}
		}
	})
	if binaries.err != nil {
		t.Fatalf("build test actor: %v", binaries.err)
	}
	return binaries.counter, binaries.helper
}

// Memholder is the memholder binary: the counter with ballast.
func Memholder(t testing.TB) string {
	t.Helper()
	Binaries(t)
	return binaries.memholder
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string { return e.pkg + ": " + e.err.Error() + "\n" + e.out }

// Options shape a test actor's bundle.
type Options struct {
	// Ballast, when set, runs memholder with these arguments (TEMPLATE_MIB
	// OWN_MIB ZERO_MIB SEED) instead of the plain counter.
	Ballast []string
	// Durable maps folders inside the sandbox to host folders.
	Durable map[string]string
	// FakeHelper mounts the fake helper at bundle.HelperPath and the host
	// folder Ctl at /stasis-ctl.
	FakeHelper bool
	Ctl        string
	// Listen, when set, has the counter answer over TCP there too (such
	// as :8000).
	Listen string
}

// Bundle writes an OCI bundle in dir whose process is "counter serve", or
// memholder with ballast; either answers "/counter await get" and friends.
func Bundle(t testing.TB, dir string, opts Options) string {
	t.Helper()
	counter, helper := Binaries(t)
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	program, args := counter, []string{"/counter", "serve"}
	if opts.Listen != "" {
		args = append(args, opts.Listen)
	}
	if opts.Ballast != nil {
		program, args = binaries.memholder, append([]string{"/counter"}, opts.Ballast...)
	}
	data, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "counter"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: args, Cwd: "/", Env: []string{"PATH=/"}},
		Root:    &specs.Root{Path: "rootfs"},
		// No tmpfs over /tmp: the test's host folders live under /tmp, and
		// runsc shows a bind mount empty when its source lies under a path
		// the same spec mounts over.
		Mounts: []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux:  &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"}}},
	}
	for inside, host := range opts.Durable {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: inside, Source: host, Type: "bind", Options: []string{"bind", "rw"}})
	}
	if opts.FakeHelper {
		if err := bundle.AddHelper(spec, helper); err != nil {
			t.Fatal(err)
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/stasis-ctl", Source: opts.Ctl, Type: "bind", Options: []string{"bind", "rw"}})
	}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	return dir
}

// RunscRoot is a temporary runsc state folder. runsc (from September 2026)
// pins an empty network namespace there for --network none, a mount that
// would keep the folder from being removed; it is unmounted when the test
// ends.
func RunscRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	t.Cleanup(func() { UnpinNetNS(root) })
	return root
}

// UnpinNetNS unmounts the network namespace runsc pins in a state folder:
// every mount of it, since runsc commands that race to create the first
// sandboxes of a root may each pin it.
func UnpinNetNS(root string) {
	for range 64 {
		if unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH) != nil {
			return
		}
	}
}
