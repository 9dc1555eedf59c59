// Package hostpolicy says which host paths, and which devices, the templates
// that any caller of stasisd's socket creates may give their sandboxes.
package hostpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime/microvm"
)

// Policy says which host paths templates may give their sandboxes.
// Whoever reaches stasisd's socket can create templates, and a template's
// bundle folder, its root filesystem and every bind mount in it are host
// paths that a sandbox then reads or writes as root. Each must lie, with
// its symlinks resolved, in one of Paths; a read-write bind mount only in a
// path marked ReadWrite; the host's own root only with AllowRoot. stasisd's
// data folder is never given out (it holds other actors' memory and the
// journal), bar its templates folder, nor is a folder that holds it. A
// bundle may not list devices (GPU templates get theirs from stasisd) or
// OCI hooks (which runsc runs on the host). docs/service.md describes the
// trust model.
type Policy struct {
	Paths []Path
	// AllowRoot lets a template use the host's / as its rootfs or mount it.
	AllowRoot bool
	// DataDir is stasisd's data folder, which templates may not reach but
	// for its TemplatesDir.
	DataDir, TemplatesDir string
}

// Path is a host folder templates may use.
type Path struct {
	Path      string `json:"path"`
	ReadWrite bool   `json:"readWrite,omitempty"`
}

func (p Path) String() string {
	if p.ReadWrite {
		return p.Path + ":rw"
	}
	return p.Path
}

// ParsePath reads PATH, PATH:ro or PATH:rw.
func ParsePath(s string) (Path, error) {
	path, mode, hasMode := strings.Cut(s, ":")
	hp := Path{Path: path, ReadWrite: mode == "rw"}
	if hasMode && mode != "rw" && mode != "ro" {
		return hp, fmt.Errorf("%w: host path %q: want PATH, PATH:ro or PATH:rw", errdefs.ErrInvalidArgument, s)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return hp, fmt.Errorf("%w: host path %q must be a clean absolute path", errdefs.ErrInvalidArgument, s)
	}
	return hp, nil
}

// Defaults are the folders templates may always use, read-only:
// the host's system software, and the data folder's templates folder.
func Defaults(templatesDir string) []Path {
	return []Path{{Path: "/usr"}, {Path: "/opt"}, {Path: templatesDir}}
}

// ErrForbidden marks a template refused by the host path policy.
var ErrForbidden = errdefs.New(errdefs.ErrPermissionDenied, "forbidden by the host path policy")

// Check refuses a policy with a malformed path.
func (p Policy) Check() error {
	for _, hp := range p.Paths {
		if _, err := ParsePath(hp.String()); err != nil {
			return err
		}
	}
	return nil
}

// Allows refuses a host path a sandbox may not have; rw says it would be
// mounted read-write.
func (p Policy) Allows(what, path string, rw bool) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%w: %s %q must be an absolute host path", ErrForbidden, what, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) && p.within(filepath.Clean(path)) {
		// Only inside a folder templates may use: elsewhere a refusal
		// says nothing of what the host holds.
		return errdefs.Mark(fmt.Errorf("%s %s does not exist on this node", what, path), errdefs.ErrNotFound)
	}
	if err != nil && !p.within(filepath.Clean(path)) {
		// Outside the folders templates may use the refusal is the same
		// whether the path exists or not.
		return fmt.Errorf("%w: %s %s is not in a folder templates may use (%s); start stasisd with --host-path FOLDER to allow the folder that holds it", ErrForbidden, what, path, p.describe())
	}
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", ErrForbidden, what, path, err)
	}
	shown := path
	if real != path {
		shown = fmt.Sprintf("%s (%s, symlinks resolved)", path, real)
	}
	if real == "/" {
		if !p.AllowRoot {
			return fmt.Errorf("%w: %s %s is the host's root; start stasisd with --allow-host-root to allow it", ErrForbidden, what, shown)
		}
		return nil
	}
	if p.DataDir != "" {
		data := p.DataDir
		if d, err := filepath.EvalSymlinks(data); err == nil {
			data = d
		}
		templates := p.TemplatesDir
		if d, err := filepath.EvalSymlinks(templates); err == nil {
			templates = d
		}
		inData := real == data || strings.HasPrefix(real, data+"/")
		if inData && !(real == templates || strings.HasPrefix(real, templates+"/")) || strings.HasPrefix(data, real+"/") {
			return fmt.Errorf("%w: %s %s reaches stasisd's data folder %s, which holds other actors' memory and the journal (only %s may be used)", ErrForbidden, what, shown, data, templates)
		}
	}
	// The most specific allowed folder decides (a read-write folder
	// inside a read-only one is read-write).
	var best *Path
	bestLen := -1
	for i, hp := range p.Paths {
		base := hp.Path
		if b, err := filepath.EvalSymlinks(base); err == nil {
			base = b
		}
		if (real == base || strings.HasPrefix(real, strings.TrimSuffix(base, "/")+"/")) && len(base) > bestLen {
			best, bestLen = &p.Paths[i], len(base)
		}
	}
	if best == nil {
		return fmt.Errorf("%w: %s %s is not in a folder templates may use (%s); start stasisd with --host-path %s to allow it", ErrForbidden, what, shown, p.describe(), real)
	}
	if rw && !best.ReadWrite {
		return fmt.Errorf("%w: %s %s is mounted read-write, and %s is read-only for templates; mount it read-only, or start stasisd with --host-path %s:rw", ErrForbidden, what, shown, best.Path, best.Path)
	}
	return nil
}

// within says whether path lies in a folder templates may use, as
// written (without resolving symlinks).
func (p Policy) within(path string) bool {
	for _, hp := range p.Paths {
		if base := filepath.Clean(hp.Path); path == base || strings.HasPrefix(path, strings.TrimSuffix(base, "/")+"/") {
			return true
		}
	}
	return false
}

func (p Policy) describe() string {
	if len(p.Paths) == 0 {
		return "none are allowed"
	}
	names := make([]string, len(p.Paths))
	for i, hp := range p.Paths {
		names[i] = hp.String()
	}
	return strings.Join(names, ", ")
}

// CheckSpec refuses a bundle's spec that gives the sandbox more of the host
// than the policy allows: its root, every bind mount, any device or hook.
func (p Policy) CheckSpec(spec *specs.Spec, bundleDir string) error {
	//lint:ignore SA1019 Prestart is deprecated in the spec, but runtimes still run it: a bundle with one is refused like any hook
	if h := spec.Hooks; h != nil && (len(h.Prestart) > 0 || len(h.CreateRuntime) > 0 || len(h.CreateContainer) > 0 || len(h.StartContainer) > 0 || len(h.Poststart) > 0 || len(h.Poststop) > 0) {
		return fmt.Errorf("%w: the bundle %s has OCI hooks, which run on the host; remove them", ErrForbidden, bundleDir)
	}
	if spec.Linux != nil && len(spec.Linux.Devices) > 0 {
		return fmt.Errorf("%w: the bundle %s lists devices (%s); remove them (a GPU template gets the NVIDIA devices with gpus)", ErrForbidden, bundleDir, spec.Linux.Devices[0].Path)
	}
	if spec.Root != nil {
		root := spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(bundleDir, root)
		}
		// runsc lays an overlay over the root filesystem: the sandbox's
		// writes never reach the host folder, which it only reads.
		if err := p.Allows("root filesystem", root, false); err != nil {
			return err
		}
	}
	if vm := spec.VM; vm != nil {
		// QEMU reads a guest's kernel, initramfs and disk on the host.
		for what, path := range map[string]string{"guest kernel": vm.Kernel.Path, "guest initramfs": vm.Kernel.InitRD, "guest image": vm.Image.Path} {
			if path == "" {
				continue
			}
			if err := p.Allows(what, bundle.HostPath(bundleDir, path), false); err != nil {
				return err
			}
		}
	}
	if v, ok := spec.Annotations[microvm.AnnotationDevices]; ok {
		var devices []api.Device
		if err := json.Unmarshal([]byte(v), &devices); err != nil {
			return fmt.Errorf("%w: the bundle %s: annotation %s: %v", errdefs.ErrInvalidArgument, bundleDir, microvm.AnnotationDevices, err)
		}
		if err := CheckVMDevices(devices); err != nil {
			return fmt.Errorf("the bundle %s: %w", bundleDir, err)
		}
	}
	for _, m := range spec.Mounts {
		if !bundle.IsBind(m) {
			continue
		}
		rw := !slices.Contains(m.Options, "ro")
		if err := p.Allows("bind mount source for "+m.Destination, m.Source, rw); err != nil {
			return err
		}
	}
	return nil
}
