package bundle

import (
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// HostSpec writes an empty root filesystem under dir/rootfs and returns a
// spec that runs args on the host's own folders, bind-mounted read-only:
// host programs run in a sandbox without an image. The host's top-level
// symlinks (/bin -> usr/bin on merged-/usr systems) are copied into the
// rootfs. Bind sources must not lie under a folder the spec mounts over.
func HostSpec(dir string, hostDirs []string, args []string) (*specs.Spec, error) {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"proc", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		target, err := os.Readlink("/" + name)
		if err != nil {
			continue
		}
		link := filepath.Join(rootfs, name)
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return nil, fmt.Errorf("host rootfs: %w", err)
		}
	}
	spec := &specs.Spec{
		Version:  specs.Version,
		Process:  &specs.Process{Args: args, Cwd: "/", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		Root:     &specs.Root{Path: "rootfs"},
		Hostname: "stasis",
		Mounts:   []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux:    &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"}}},
	}
	for _, d := range hostDirs {
		if _, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("host rootfs: %w", err)
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: d, Source: d, Type: "bind", Options: []string{"rbind", "ro"}})
	}
	return spec, nil
}
