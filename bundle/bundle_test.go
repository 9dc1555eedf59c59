package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	spec := &specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/app"}}}
	if err := Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || got.Process.Args[0] != "/app" {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("Load of an empty folder: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load accepted a malformed config.json")
	}
}

func TestAddHelper(t *testing.T) {
	dir := t.TempDir()
	helper := filepath.Join(dir, "stasis-cuda")
	if err := os.WriteFile(helper, []byte("#!/bin/true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{}
	if err := AddHelper(spec, helper); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("a non-executable helper: %v", err)
	}
	if err := os.Chmod(helper, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := AddHelper(spec, helper); err != nil {
			t.Fatal(err)
		}
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != HelperPath || spec.Mounts[0].Source != helper || spec.Mounts[0].Options[1] != "ro" {
		t.Fatalf("mounts %+v; want one read-only bind at %s", spec.Mounts, HelperPath)
	}
}

func TestAddDevices(t *testing.T) {
	spec := &specs.Spec{}
	if IsGPU(spec) {
		t.Fatal("an empty spec is not a GPU spec")
	}
	if err := AddDevices(spec, []string{"/dev/null"}); err != nil {
		t.Fatal(err)
	}
	d := spec.Linux.Devices[0]
	if d.Path != "/dev/null" || d.Type != "c" || d.Major != 1 || d.Minor != 3 {
		t.Errorf("device %+v", d)
	}
	if c := spec.Linux.Resources.Devices[0]; !c.Allow || *c.Major != 1 || c.Access != "rwm" {
		t.Errorf("cgroup rule %+v", c)
	}
	if err := AddDevices(spec, []string{"/etc/hostname"}); err == nil {
		t.Error("a regular file was taken as a device")
	}
	spec.Linux.Devices = append(spec.Linux.Devices, specs.LinuxDevice{Path: "/dev/nvidiactl"})
	if !IsGPU(spec) {
		t.Error("a spec with /dev/nvidiactl is a GPU spec")
	}
}

func TestHelperCDISpec(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteHelperCDISpec(filepath.Join(dir, "cdi"), "/opt/stasis/bin/stasis-cuda")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		CDIVersion string `json:"cdiVersion"`
		Kind       string `json:"kind"`
		Devices    []struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				Mounts []struct {
					HostPath      string `json:"hostPath"`
					ContainerPath string `json:"containerPath"`
				} `json:"mounts"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Devices[0].ContainerEdits.Mounts[0]
	if doc.Kind != CDIKind || doc.CDIVersion == "" || doc.Devices[0].Name != "helper" || m.HostPath != "/opt/stasis/bin/stasis-cuda" || m.ContainerPath != HelperPath {
		t.Errorf("CDI spec %s", data)
	}
}

func TestDurableSource(t *testing.T) {
	spec := &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/data", Source: "/srv/actor/data", Type: "bind", Options: []string{"rbind"}},
		{Destination: "/scratch", Source: "tmpfs", Type: "tmpfs"},
	}}
	if src, err := DurableSource(spec, "/data/"); err != nil || src != "/srv/actor/data" {
		t.Errorf("DurableSource(/data/) = %q, %v", src, err)
	}
	if _, err := DurableSource(spec, "/scratch"); err == nil || !strings.Contains(err.Error(), "not a bind mount") {
		t.Errorf("a tmpfs taken as durable: %v", err)
	}
}

func TestHostPathOf(t *testing.T) {
	spec := &specs.Spec{Root: &specs.Root{Path: "rootfs"}, Mounts: []specs.Mount{
		{Destination: "/usr", Type: "bind", Source: "/host/usr"},
		{Destination: "/usr/local/lib/", Options: []string{"rbind", "ro"}, Source: "/host/lib"},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/weights", Type: "bind", Source: "w"},
	}}
	for p, want := range map[string]string{
		"/counter":            "/b/rootfs/counter",
		"/usr":                "/host/usr",
		"/usr/bin/python3":    "/host/usr/bin/python3",
		"/usr/local/lib/x.so": "/host/lib/x.so",
		"/usr/local/libx/y":   "/host/usr/local/libx/y",
		"/tmp/x":              "",
		"/weights/model.bin":  "/b/w/model.bin",
		"/usrx/a":             "/b/rootfs/usrx/a",
		"/":                   "/b/rootfs",
	} {
		if got := HostPathOf(spec, "/b", p); got != want {
			t.Errorf("HostPathOf(%q) = %q, want %q", p, got, want)
		}
	}
	root := &specs.Spec{Root: &specs.Root{Path: "rootfs"}, Mounts: []specs.Mount{{Destination: "/", Type: "bind", Source: "/elsewhere"}}}
	if got := HostPathOf(root, "/b", "/etc/hosts"); got != "/elsewhere/etc/hosts" {
		t.Errorf("under a bind mount of /: %q", got)
	}
}
