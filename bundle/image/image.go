// Package image makes an OCI bundle from a container image on this node:
// an OCI image layout folder or a `docker save` / `podman save` tarball,
// read by go-containerregistry. Its layers are flattened (whiteouts
// applied) into the bundle's rootfs through an os.Root, so that no entry
// of a layer reaches outside it, and its config (entrypoint and cmd, env,
// working folder, user) becomes the bundle's process.
package image

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/errdefs"
)

// defaultPath is the PATH of a process whose image sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Process is what an image runs, from its config.
type Process struct {
	Args []string
	Env  []string
	Cwd  string
	User string
}

// Unpack writes a bundle of the image at src into dst, which must not
// exist: dst/rootfs holds its flattened layers, dst/config.json runs its
// entrypoint with args (its cmd when args is empty, as docker run does).
// On failure dst is removed.
func Unpack(ctx context.Context, src, dst string, args []string) (p Process, err error) {
	img, err := open(src)
	if err != nil {
		return p, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return p, fmt.Errorf("%w: image %s: its config: %w", errdefs.ErrInvalidArgument, src, err)
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return p, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	rootfs := filepath.Join(dst, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return p, err
	}
	layers := mutate.Extract(img)
	err = untar(ctx, layers, rootfs)
	layers.Close()
	if err != nil {
		return p, fmt.Errorf("image %s: unpack its layers: %w", src, err)
	}
	p = Process{Env: cfg.Config.Env, Cwd: cfg.Config.WorkingDir, User: cfg.Config.User}
	p.Args = append(append([]string{}, cfg.Config.Entrypoint...), cfg.Config.Cmd...)
	if len(args) > 0 {
		p.Args = append(append([]string{}, cfg.Config.Entrypoint...), args...)
	}
	if len(p.Args) == 0 {
		return p, fmt.Errorf("%w: image %s has no entrypoint or cmd: give the process to run after --", errdefs.ErrInvalidArgument, src)
	}
	spec, err := bundleSpec(p, rootfs)
	if err != nil {
		return p, fmt.Errorf("%w: image %s: %w", errdefs.ErrInvalidArgument, src, err)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return p, err
	}
	return p, os.WriteFile(filepath.Join(dst, "config.json"), data, 0o600)
}

// open reads the image at src: an OCI layout folder holding one image
// (or one for this machine's platform), or a tarball of one image.
func open(src string) (v1.Image, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", src, errdefs.Mark(err, errdefs.ErrNotFound))
	}
	if !st.IsDir() {
		img, err := tarball.ImageFromPath(src, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: image %s is not a docker save or podman save tarball of one image (or an OCI layout folder): %w", errdefs.ErrInvalidArgument, src, err)
		}
		return img, nil
	}
	lp, err := layout.FromPath(src)
	if err != nil {
		return nil, fmt.Errorf("%w: image %s is not an OCI image layout (no oci-layout and index.json): %w", errdefs.ErrInvalidArgument, src, err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: image %s: %w", errdefs.ErrInvalidArgument, src, err)
	}
	return pick(src, idx, 0)
}

// pick is the image of idx for this machine: the only one, or the one for
// linux and its architecture, looking into nested indexes.
func pick(src string, idx v1.ImageIndex, depth int) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: image %s: %w", errdefs.ErrInvalidArgument, src, err)
	}
	var fits []v1.Descriptor
	for _, d := range m.Manifests {
		if d.Platform == nil || d.Platform.OS == "" || (d.Platform.OS == "linux" && d.Platform.Architecture == goruntime.GOARCH) {
			fits = append(fits, d)
		}
	}
	if len(fits) != 1 {
		return nil, fmt.Errorf("%w: image %s holds %d manifests, %d of them for linux/%s: save the one image to run", errdefs.ErrInvalidArgument, src, len(m.Manifests), len(fits), goruntime.GOARCH)
	}
	if fits[0].MediaType.IsIndex() && depth < 2 {
		inner, err := idx.ImageIndex(fits[0].Digest)
		if err != nil {
			return nil, fmt.Errorf("%w: image %s: %w", errdefs.ErrInvalidArgument, src, err)
		}
		return pick(src, inner, depth+1)
	}
	img, err := idx.Image(fits[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("%w: image %s: %w", errdefs.ErrInvalidArgument, src, err)
	}
	return img, nil
}

// untar writes the flattened layers into dir. Every entry is made through
// an os.Root of dir: a name or link that would lead outside it fails.
// Devices and fifos are left out (the sandbox has its own /dev).
func untar(ctx context.Context, r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			continue
		case tar.TypeLink:
			target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
			if err := root.Link(target, name); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			continue
		default:
			continue
		}
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := root.Chmod(name, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

// bundleSpec is the OCI runtime spec that runs p over rootfs.
func bundleSpec(p Process, rootfs string) (*specs.Spec, error) {
	env := p.Env
	hasPath := false
	for _, e := range env {
		hasPath = hasPath || strings.HasPrefix(e, "PATH=")
	}
	if !hasPath {
		env = append([]string{defaultPath}, env...)
	}
	user, err := resolveUser(p.User, rootfs)
	if err != nil {
		return nil, err
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: p.Args, Env: env, Cwd: cwd, User: user},
		Root:    &specs.Root{Path: "rootfs"},
		Mounts:  []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux:   &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"}}},
	}, nil
}

// resolveUser reads an image's user: "uid[:gid]", or names from the
// image's /etc/passwd and /etc/group; empty is root.
func resolveUser(user, rootfs string) (specs.User, error) {
	if user == "" {
		return specs.User{}, nil
	}
	// Read through a root: the image's /etc/passwd may be a link that
	// leads out of it.
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return specs.User{}, err
	}
	defer root.Close()
	name, group, _ := strings.Cut(user, ":")
	uid, gid, err := lookup(root, name, "etc/passwd", true)
	if err != nil {
		return specs.User{}, err
	}
	if group != "" {
		if gid, _, err = lookup(root, group, "etc/group", false); err != nil {
			return specs.User{}, err
		}
	}
	return specs.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// lookup finds name (or a number) in a passwd or group file: its id and,
// for a user, its group id.
func lookup(root *os.Root, name, file string, isUser bool) (id, gid int, err error) {
	if n, err := strconv.ParseUint(name, 10, 31); err == nil {
		return int(n), 0, nil
	}
	f, err := root.Open(file)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: the image has no %s to look it up in", name, path.Base(file))
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		fields := strings.Split(lines.Text(), ":")
		if len(fields) < 4 || fields[0] != name {
			continue
		}
		id, err1 := strconv.Atoi(fields[2])
		gid, err2 := strconv.Atoi(fields[3])
		if err1 != nil || (isUser && err2 != nil) {
			break
		}
		return id, gid, nil
	}
	return 0, 0, fmt.Errorf("user %q is not in the image's %s", name, path.Base(file))
}
