// Command ociimage builds Stasis's container images from folders, without a
// container engine (scripts/build-images.sh), and unpacks one into a
// folder (scripts/check-images.sh).
//
//	ociimage build --tag REF --out PATH [--entrypoint PATH] [--user UID] [--env K=V]... ROOTFS
//	ociimage unpack LAYOUT DIR
//	ociimage run [--bind PATH]... ROOTFS COMMAND [ARG...]
//
// build writes an image of one layer, ROOTFS's files owned by root (their
// modes kept, times zeroed, so that a build is reproducible), as an OCI
// image layout in PATH and as a docker-save archive PATH.tar (docker load,
// podman load, crane push). unpack writes an OCI bundle of the layout's
// image into DIR (DIR/rootfs, DIR/config.json), as stasisd does for a
// template made from an image. run runs a command in an unpacked image's
// root as a container runtime runs a privileged container on the host's
// network and PID namespace (pivot_root in a private mount namespace, with
// /proc, /sys and /dev, and each host folder PATH at the same path): a
// chroot would not do, as the kernel refuses a chrooted process the user
// namespaces runsc makes.
package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle/image"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: ociimage build|unpack|run ARGS")
	}
	switch args[0] {
	case "build":
		return build(args[1:])
	case "unpack":
		if len(args) != 3 {
			return errors.New("usage: ociimage unpack LAYOUT DIR")
		}
		_, err := image.Unpack(context.Background(), args[1], args[2], nil)
		return err
	case "run":
		return runIn(args[1:])
	}
	return fmt.Errorf("unknown command %q: build or unpack", args[0])
}

func build(args []string) error {
	fs := pflag.NewFlagSet("build", pflag.ContinueOnError)
	tag := fs.String("tag", "", "the image's reference, e.g. ghcr.io/stasis-run/stasis-node:v0.1.0")
	out := fs.String("out", "", "the OCI layout folder to write (and OUT.tar, a docker-save archive)")
	entrypoint := fs.String("entrypoint", "", "the image's entrypoint")
	user := fs.String("user", "", "the user its processes run as")
	env := fs.StringArray("env", nil, "NAME=VALUE in its environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tag == "" || *out == "" || fs.NArg() != 1 {
		return errors.New("usage: ociimage build --tag REF --out PATH [--entrypoint PATH] [--user UID] [--env K=V]... ROOTFS")
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return err
	}
	rootfs := fs.Arg(0)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return tarFolder(rootfs), nil })
	if err != nil {
		return fmt.Errorf("the layer of %s: %w", rootfs, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", goruntime.GOARCH
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cfg.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, *env...)
	cfg.Config.User = *user
	if *entrypoint != "" {
		cfg.Config.Entrypoint = []string{*entrypoint}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	if err := os.RemoveAll(*out); err != nil {
		return err
	}
	path, err := layout.Write(*out, empty.Index)
	if err != nil {
		return err
	}
	if err := path.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref.String()})); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if err := tarball.WriteToFile(*out+".tar", ref, img); err != nil {
		return fmt.Errorf("write %s.tar: %w", *out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s: %s and %s.tar\n", ref, digest, *out, *out)
	return nil
}

// tarFolder streams dir's files as a tar, owned by root, their times
// zeroed.
func tarFolder(dir string) io.ReadCloser {
	r, w := io.Pipe()
	go func() {
		tw := tar.NewWriter(w)
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || path == dir {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(path); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			hdr.Name = filepath.ToSlash(rel)
			if d.IsDir() {
				hdr.Name += "/"
			}
			hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
			hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
			hdr.Format = tar.FormatPAX
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		})
		if err == nil {
			err = tw.Close()
		}
		w.CloseWithError(err)
	}()
	return r
}

func runIn(args []string) error {
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	binds := fs.StringArray("bind", nil, "a host folder given to the command at the same path (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 2 {
		return errors.New("usage: ociimage run [--bind PATH]... ROOTFS COMMAND [ARG...]")
	}
	root, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		return err
	}
	// The mount namespace is the thread's, and exec keeps it.
	goruntime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	type mount struct {
		source, target, fstype string
		flags                  uintptr
	}
	mounts := []mount{
		{"", "/", "", unix.MS_REC | unix.MS_PRIVATE},
		{root, root, "", unix.MS_BIND | unix.MS_REC},
		{"proc", root + "/proc", "proc", 0},
		{"/sys", root + "/sys", "", unix.MS_BIND | unix.MS_REC},
		{"/dev", root + "/dev", "", unix.MS_BIND | unix.MS_REC},
	}
	for _, b := range *binds {
		mounts = append(mounts, mount{b, root + b, "", unix.MS_BIND | unix.MS_REC})
	}
	for _, m := range mounts {
		if m.target != "/" {
			if err := os.MkdirAll(m.target, 0o755); err != nil {
				return err
			}
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, ""); err != nil {
			return fmt.Errorf("mount %s at %s: %w", m.source, m.target, err)
		}
	}
	old := filepath.Join(root, ".oldroot")
	if err := os.MkdirAll(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root %s: %w", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the host's root: %w", err)
	}
	_ = os.Remove("/.oldroot")
	return unix.Exec(fs.Arg(1), fs.Args()[1:], os.Environ())
}
