package initramfs_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/runtime/microvm/initramfs"
)

type entry struct {
	mode      uint64
	rdevMajor uint64
	rdevMinor uint64
	data      string
}

// readNewc parses a gzip'd newc archive the way the kernel does, checking
// every header's magic and the 4-byte alignment of names and data.
func readNewc(t *testing.T, archive []byte) (map[string]entry, []string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]entry{}
	var order []string
	off := 0
	for {
		if off%4 != 0 || off+110 > len(raw) || string(raw[off:off+6]) != "070701" {
			t.Fatalf("bad header at offset %d", off)
		}
		field := func(i int) uint64 {
			v, err := strconv.ParseUint(string(raw[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		mode, size, major, minor, nameSize := field(1), field(6), field(9), field(10), field(11)
		name := string(raw[off+110 : off+110+int(nameSize)-1])
		off = (off + 110 + int(nameSize) + 3) &^ 3
		data := string(raw[off : off+int(size)])
		off = (off + int(size) + 3) &^ 3
		if name == "TRAILER!!!" {
			if off != len(raw) {
				t.Fatalf("%d bytes after the trailer", len(raw)-off)
			}
			return entries, order
		}
		entries[name] = entry{mode: mode, rdevMajor: major, rdevMinor: minor, data: data}
		order = append(order, name)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestWriteLaysOutTheGuest(t *testing.T) {
	dir := t.TempDir()
	g := initramfs.Guest{
		Agent:      writeFile(t, filepath.Join(dir, "agent"), "AGENT", 0o755),
		Busybox:    writeFile(t, filepath.Join(dir, "busybox"), "BUSYBOX", 0o755),
		Applets:    []string{"sh", "cat"},
		ModulesDir: filepath.Join(dir, "modules"),
		Modules:    []string{"kernel/a/virtio.ko", "kernel/b/virtio_console.ko"},
		Files:      map[string]string{"/opt/app/run": writeFile(t, filepath.Join(dir, "run"), "RUN", 0o750)},
	}
	writeFile(t, filepath.Join(g.ModulesDir, g.Modules[0]), "MOD1", 0o644)
	writeFile(t, filepath.Join(g.ModulesDir, g.Modules[1]), "MOD2", 0o644)
	var buf bytes.Buffer
	if err := initramfs.Write(&buf, g); err != nil {
		t.Fatal(err)
	}
	entries, order := readNewc(t, buf.Bytes())
	want := map[string]entry{
		"init":                          {mode: 0o100755, data: "AGENT"},
		"dev/console":                   {mode: 0o020600, rdevMajor: 5, rdevMinor: 1},
		"bin/stasis-agent":              {mode: 0o120777, data: "/init"},
		"bin/busybox":                   {mode: 0o100755, data: "BUSYBOX"},
		"bin/sh":                        {mode: 0o120777, data: "busybox"},
		"bin/cat":                       {mode: 0o120777, data: "busybox"},
		"lib/modules/virtio.ko":         {mode: 0o100644, data: "MOD1"},
		"lib/modules/virtio_console.ko": {mode: 0o100644, data: "MOD2"},
		"etc/stasis/modules":            {mode: 0o100644, data: "/lib/modules/virtio.ko\n/lib/modules/virtio_console.ko\n"},
		"opt/app/run":                   {mode: 0o100750, data: "RUN"},
		"opt/app":                       {mode: 0o040755},
	}
	for name, w := range want {
		if got, ok := entries[name]; !ok || got != w {
			t.Errorf("%s: got %+v (present %v), want %+v", name, got, ok, w)
		}
	}
	// Every folder comes before what it holds, as the kernel unpacks in order.
	seen := map[string]bool{}
	for _, name := range order {
		if parent := filepath.Dir(name); parent != "." && !seen[parent] {
			t.Errorf("%s comes before its folder %s", name, parent)
		}
		seen[name] = true
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	agent := writeFile(t, filepath.Join(dir, "agent"), "AGENT", 0o755)
	file := writeFile(t, filepath.Join(dir, "f"), "F", 0o644)
	dynamic, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		g    initramfs.Guest
		want string
	}{
		{"no agent", initramfs.Guest{}, "no agent binary"},
		{"path leaves the root", initramfs.Guest{Agent: agent, Files: map[string]string{"../etc/passwd": file}}, `path "../etc/passwd" leaves the guest's root`},
		{"path twice", initramfs.Guest{Agent: agent, Files: map[string]string{"init": file}}, "init added twice"},
		{"missing file", initramfs.Guest{Agent: agent, Files: map[string]string{"x": filepath.Join(dir, "missing")}}, "missing (for x)"},
		{"folder as file", initramfs.Guest{Agent: agent, Files: map[string]string{"x": dir}}, "not a regular file"},
		{"module outside the tree", initramfs.Guest{Agent: agent, ModulesDir: dir, Modules: []string{"nope.ko"}}, "nope.ko"},
		// The host's own sh: an executable linked dynamically.
		{"a dynamic agent", initramfs.Guest{Agent: dynamic}, "is linked dynamically (it asks for /lib"},
		{"a dynamic busybox", initramfs.Guest{Agent: agent, Busybox: dynamic}, "busybox " + dynamic + " is linked dynamically"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := initramfs.Write(io.Discard, c.g)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
