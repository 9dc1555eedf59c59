package fingerprint

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func recorded(t *testing.T) Fingerprint {
	t.Helper()
	f, err := Load("../compat/testdata/h200-node.json")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLoadRefusesBadFiles(t *testing.T) {
	good, err := os.ReadFile("../compat/testdata/h200-node.json")
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ data, want string }{
		"not json":        {"hello", "not a fingerprint"},
		"truncated":       {string(good[:len(good)/2]), "not a fingerprint"},
		"unknown version": {strings.Replace(string(good), `"formatVersion": 1`, `"formatVersion": 7`, 1), "format version 7, this stasis reads version 1"},
		"unknown field":   {strings.Replace(string(good), `"arch"`, `"archh"`, 1), "unknown field"},
		"no kernel":       {strings.Replace(string(good), `"kernel": "6.18.44-fc-v657-gpu"`, `"kernel": ""`, 1), "lacks kernel"},
		"gpu without uuid": {strings.Replace(string(good), `"uuid": "GPU-86ef0b4b-b919-1827-e09a-12d0e5216398"`, `"uuid": ""`, 1),
			"gpu.devices[0] uuid"},
	}
	dir := t.TempDir()
	for name, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(c.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: got %v, want an error naming the file and %q", name, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "absent")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestClassFollowsOnlyTheFactsThatMustMatch(t *testing.T) {
	f := recorded(t)
	class := f.Class()
	if len(class) != 16 {
		t.Fatalf("class %q", class)
	}
	busier := f
	busier.Memory.Available /= 2
	busier.Hostname = "other"
	busier.Kernel = "6.19.0"
	if busier.Class() != class {
		t.Fatal("class changed with load, hostname or kernel")
	}
	for name, edit := range map[string]func(*Fingerprint){
		"driver":   func(f *Fingerprint) { f.GPU.DriverVersion = "570.124.06" },
		"runsc":    func(f *Fingerprint) { f.Runtime.Version = "other" },
		"abi":      func(f *Fingerprint) { f.Runtime.GPUABI = "" },
		"platform": func(f *Fingerprint) { f.Runtime.Platform = "kvm" },
	} {
		g := recorded(t)
		edit(&g)
		if g.Class() == class {
			t.Errorf("class unchanged after editing the %s", name)
		}
	}
}

func TestLabelsAreValidNFDFeatures(t *testing.T) {
	f := recorded(t)
	labels := f.Labels()
	valid := regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	want := map[string]string{"stasis.dev/class": f.Class(), "stasis.dev/gpu.model": "NVIDIA-H200", "stasis.dev/gpu.count": "1", "stasis.dev/gpu.driver": "580.159.04"}
	got := map[string]string{}
	for _, l := range labels {
		if len(l.Value) > 63 || !valid.MatchString(l.Value) {
			t.Errorf("label %s has an invalid value %q", l.Key, l.Value)
		}
		got[l.Key] = l.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	var buf bytes.Buffer
	expiry := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := WriteFeatureFile(&buf, labels, expiry); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "# +expiry-time=2026-12-01T00:00:00Z\n") || !strings.Contains(buf.String(), "\nstasis.dev/class="+f.Class()+"\n") {
		t.Fatalf("feature file:\n%s", buf.String())
	}
	if got := labelValue(strings.Repeat("x", 70) + "/"); len(got) != 63 {
		t.Errorf("long value cut to %d characters", len(got))
	}
}

// TestCollectThisNode reads the real facts of this machine, which has no
// NVIDIA driver: a valid node without GPUs.

func TestGFDLabels(t *testing.T) {
	f := recorded(t)
	got := map[string]string{}
	for _, l := range f.GFDLabels() {
		got[l.Key] = l.Value
	}
	want := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "1", "nvidia.com/cuda.driver.major": "580"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
	if got["nvidia.com/gpu.memory"] == "" || got["nvidia.com/cuda.driver.minor"] == "" {
		t.Errorf("memory or driver minor missing: %v", got)
	}
	f.GPU.Available = false
	if l := f.GFDLabels(); l != nil {
		t.Errorf("a node without GPUs gets GFD labels %v", l)
	}
}
