package templates

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle/image"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/op"
)

// imagesDir holds the bundles stasisd unpacked from the image templates'
// images, one folder per template, in the folder templates may use.
func (s *Templates) imagesDir() string {
	dir := s.cfg.HostPaths.TemplatesDir
	if dir == "" {
		dir = filepath.Join(s.cfg.DataDir, "templates")
	}
	return filepath.Join(dir, ".images")
}

// unpackImage makes image template t's bundle from its image: checked
// against the host path policy, unpacked into a folder of its own, and
// named as t's bundle (its args applied there); removeImage removes it if
// the template is refused after all.
func (s *Templates) unpackImage(ctx context.Context, t *api.Template) error {
	switch {
	case t.Bundle != "" || t.Rootfs != "":
		return fmt.Errorf("%w: template %s: give an image, a bundle or a rootfs, one of them", errdefs.ErrInvalidArgument, t.Name)
	case t.Runtime == api.RuntimeMicroVM:
		return fmt.Errorf("%w: template %s: images run in gVisor; a micro-VM template takes a bundle or a vm section", errdefs.ErrInvalidArgument, t.Name)
	case !filepath.IsAbs(t.Image):
		return fmt.Errorf("%w: template %s: image %q must be an absolute path", errdefs.ErrInvalidArgument, t.Name, t.Image)
	}
	if err := op.CheckName("template", t.Name); err != nil {
		return err
	}
	// The folder is the template's name's: not while a template has it.
	if _, err := s.journal.Template(ctx, t.Name); err == nil {
		return fmt.Errorf("%w: template %s exists", errdefs.ErrAlreadyExists, t.Name)
	} else if !errors.Is(err, journal.ErrNotFound) {
		return err
	}
	if err := s.cfg.HostPaths.Allows("image", t.Image, false); err != nil {
		return fmt.Errorf("template %s: %w", t.Name, err)
	}
	if err := os.MkdirAll(s.imagesDir(), 0o700); err != nil {
		return err
	}
	dir := filepath.Join(s.imagesDir(), t.Name)
	// Left by a stasisd that stopped while it unpacked, or made the
	// template and was refused: no template has it.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := image.Unpack(ctx, t.Image, dir, t.Args)
	if err != nil {
		return fmt.Errorf("template %s: %w", t.Name, err)
	}
	s.cfg.Log.Info("image unpacked", "template", t.Name, "image", t.Image, "bundle", dir, "args", strings.Join(p.Args, " "), "user", p.User, "cwd", p.Cwd)
	t.Bundle, t.Args = dir, nil
	return nil
}

// removeImage removes the bundle stasisd unpacked for image template t.
func (s *Templates) removeImage(t api.Template) error {
	if t.Image == "" || filepath.Dir(t.Bundle) != s.imagesDir() {
		return nil
	}
	return os.RemoveAll(t.Bundle)
}
