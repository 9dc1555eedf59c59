// Package bundle reads, edits and writes OCI bundles for Stasis actors: the
// NVIDIA device files a GPU actor needs, the stasis-cuda helper mounted at a
// fixed path inside the sandbox (or a CDI spec that injects it), and the
// host folders behind an actor's durable folders.
package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/internal/fsutil"
)

// HelperPath is where the stasis-cuda helper sits inside every GPU sandbox.
const HelperPath = "/.stasis/bin/stasis-cuda"

// Load reads a bundle's config.json.
func Load(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("OCI bundle %s: %w", dir, err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("OCI bundle %s: config.json: %w", dir, err)
	}
	return &spec, nil
}

// Save writes spec as dir's config.json, replacing it atomically.
func Save(dir string, spec *specs.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteAtomic(filepath.Join(dir, "config.json"), bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("OCI bundle %s: %w", dir, err)
	}
	return nil
}

// IsGPU tells whether the spec gives the sandbox NVIDIA devices, which is
// what turns on runsc's GPU support.
func IsGPU(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	return slices.ContainsFunc(spec.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == "/dev/nvidiactl" })
}

// AddHelper bind-mounts the host's stasis-cuda binary, read-only, at
// HelperPath.
func AddHelper(spec *specs.Spec, hostPath string) error {
	abs, err := filepath.Abs(hostPath)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || st.Mode()&0o111 == 0 {
		return fmt.Errorf("stasis-cuda helper %s: not an executable file (build it with go build ./cmd/stasis-cuda): %v", abs, err)
	}
	spec.Mounts = slices.DeleteFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == HelperPath })
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: HelperPath, Source: abs, Type: "bind", Options: []string{"bind", "ro"}})
	return nil
}

// PrepareGPU makes spec a GPU actor's: every NVIDIA device file of the host
// listed and allowed, and the helper mounted at HelperPath.
func PrepareGPU(spec *specs.Spec, helperHostPath string) error {
	devices := NVIDIADevices()
	if len(devices) == 0 {
		return fmt.Errorf("no NVIDIA device files in /dev: is the NVIDIA driver loaded on this node?")
	}
	if err := AddDevices(spec, devices); err != nil {
		return err
	}
	return AddHelper(spec, helperHostPath)
}

// NVIDIADevices lists the host's NVIDIA device files that a CUDA process
// opens: the control device, UVM and every GPU.
func NVIDIADevices() []string {
	var devs []string
	for _, pattern := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia[0-9]*"} {
		matches, _ := filepath.Glob(pattern)
		devs = append(devs, matches...)
	}
	return devs
}

// AddDevices lists host device files in the spec with their numbers, and
// allows them in the device cgroup.
func AddDevices(spec *specs.Spec, paths []string) error {
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	if spec.Linux.Resources == nil {
		spec.Linux.Resources = &specs.LinuxResources{}
	}
	for _, p := range paths {
		dev, err := deviceOf(p)
		if err != nil {
			return err
		}
		spec.Linux.Devices = slices.DeleteFunc(spec.Linux.Devices, func(d specs.LinuxDevice) bool { return d.Path == p })
		spec.Linux.Devices = append(spec.Linux.Devices, dev)
		major, minor := dev.Major, dev.Minor
		spec.Linux.Resources.Devices = append(spec.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
			Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: "rwm",
		})
	}
	return nil
}

// DurableSource is the host folder behind durable folder dir: the source of
// the bind mount at dir in the spec.
func DurableSource(spec *specs.Spec, dir string) (string, error) {
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) == filepath.Clean(dir) && IsBind(m) {
			return m.Source, nil
		}
	}
	return "", fmt.Errorf("durable folder %s is not a bind mount in the bundle: declare it as a bind mount of a host folder", dir)
}

// HostPath is a path a bundle's spec gives (its root, a guest's kernel),
// taken from the bundle's folder dir when relative.
func HostPath(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// HostPathOf is where the file at p inside the container lives on the
// host: under the source of the deepest bind mount that holds p, else
// under the root file system; "" where the deepest mount that holds p is
// not a bind mount (a tmpfs, proc). p must be absolute and clean.
func HostPathOf(spec *specs.Spec, dir, p string) string {
	var best *specs.Mount
	bestDest := ""
	for i, m := range spec.Mounts {
		dest := filepath.Clean(m.Destination)
		if (p == dest || strings.HasPrefix(p, dest+"/") || dest == "/") && (best == nil || len(dest) > len(bestDest)) {
			best, bestDest = &spec.Mounts[i], dest
		}
	}
	if best == nil {
		if spec.Root == nil {
			return ""
		}
		return filepath.Join(HostPath(dir, spec.Root.Path), p)
	}
	if !IsBind(*best) {
		return ""
	}
	return filepath.Join(HostPath(dir, best.Source), strings.TrimPrefix(p, bestDest))
}

// IsBind tells whether m is a bind mount of a host path.
func IsBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}
