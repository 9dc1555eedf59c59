// Package templates keeps the templates actors are made from, checked
// against the host path policy and the runtimes this stasisd runs, and
// writes each actor's bundle from its template.
package templates

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/hostpolicy"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/runtimes"
)

// Config is what the templates are checked and written with.
type Config struct {
	// DataDir holds the actors' folders (DATA/actors/ID).
	DataDir string
	// Helper is the host path of stasis-cuda, mounted into GPU actors.
	Helper string
	// HostPaths is what host paths templates may give their sandboxes.
	HostPaths hostpolicy.Policy
	Log       *slog.Logger
}

// Templates are the templates in the journal. Safe for concurrent use.
type Templates struct {
	cfg     Config
	journal *journal.Journal
	engines *runtimes.Engines
}

// New keeps templates in j, for the runtimes of engines.
func New(cfg Config, j *journal.Journal, engines *runtimes.Engines) *Templates {
	return &Templates{cfg: cfg, journal: j, engines: engines}
}

// Probe is a template's probe as the engine runs it.
func Probe(p api.Probe) engine.Probe {
	return engine.Probe{Command: p.Command, URL: p.URL, Timeout: time.Duration(p.TimeoutSeconds * float64(time.Second))}
}

// validate checks a template and fills in its defaults; the host paths it
// names are checked against the policy.
func (s *Templates) validate(t *api.Template) error {
	if err := op.CheckName("template", t.Name); err != nil {
		return err
	}
	if err := s.engines.Offered(*t); err != nil {
		return err
	}
	if t.Runtime == "" {
		t.Runtime = api.RuntimeGVisor
	}
	if t.Runtime == api.RuntimeMicroVM {
		if err := s.validateVM(t); err != nil {
			return err
		}
	}
	switch {
	case t.Runtime == api.RuntimeMicroVM && t.Bundle == "":
		// validateVM checked the guest and the args.
	case t.VM != nil:
		return fmt.Errorf("%w: template %s: a vm section is for micro-VM templates (runtime %s)", errdefs.ErrInvalidArgument, t.Name, api.RuntimeMicroVM)
	case (t.Bundle == "") == (t.Rootfs == ""):
		return fmt.Errorf("%w: template %s: give either a bundle or a rootfs", errdefs.ErrInvalidArgument, t.Name)
	case t.Bundle != "":
		if !filepath.IsAbs(t.Bundle) {
			return fmt.Errorf("%w: template %s: bundle %q must be an absolute path", errdefs.ErrInvalidArgument, t.Name, t.Bundle)
		}
		if _, err := s.loadBundle(*t); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	default:
		if !filepath.IsAbs(t.Rootfs) || len(t.Args) == 0 {
			return fmt.Errorf("%w: template %s: a rootfs template needs an absolute rootfs path and the args to run", errdefs.ErrInvalidArgument, t.Name)
		}
		if st, err := os.Stat(t.Rootfs); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: template %s: rootfs %s is not a folder", errdefs.ErrInvalidArgument, t.Name, t.Rootfs)
		}
		if err := s.cfg.HostPaths.Allows("rootfs", t.Rootfs, false); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	if err := checkServe(t); err != nil {
		return err
	}
	switch t.Restart {
	case "", api.RestartNever, api.RestartOnFailure, api.RestartAlways:
	default:
		return fmt.Errorf("%w: template %s: restart %q: want %s, %s or %s", errdefs.ErrInvalidArgument, t.Name, t.Restart, api.RestartNever, api.RestartOnFailure, api.RestartAlways)
	}
	if t.GPUs < 0 || t.MemoryBytes < 0 || t.Probe.TimeoutSeconds < 0 {
		return fmt.Errorf("%w: template %s: gpus, memoryBytes and probe.timeoutSeconds cannot be negative", errdefs.ErrInvalidArgument, t.Name)
	}
	if t.GPUs > 0 && s.cfg.Helper == "" && t.Runtime == api.RuntimeGVisor {
		return fmt.Errorf("%w: template %s wants GPUs, and stasisd has no stasis-cuda helper to mount (start it with --helper)", errdefs.ErrInvalidArgument, t.Name)
	}
	for i, d := range t.Durable {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" || slices.Contains(t.Durable[:i], d) {
			return fmt.Errorf("%w: template %s: durable folder %q must be a clean absolute path other than /, given once", errdefs.ErrInvalidArgument, t.Name, d)
		}
	}
	if err := s.checkMounts(*t); err != nil {
		return err
	}
	for _, sc := range []*api.Scope{&t.Snapshots.OnPause, &t.Snapshots.OnCommit} {
		switch *sc {
		case "":
			*sc = api.ScopeFull
		case api.ScopeFull:
		case api.ScopeData:
			if len(t.Durable) == 0 {
				return fmt.Errorf("%w: template %s: Data snapshots keep the durable folders, and it has none", errdefs.ErrInvalidArgument, t.Name)
			}
		default:
			return fmt.Errorf("%w: template %s: snapshot scope %q: want Full or Data", errdefs.ErrInvalidArgument, t.Name, *sc)
		}
	}
	return nil
}

// Create validates and records a template.
func (s *Templates) Create(ctx context.Context, t api.Template) (api.Template, error) {
	t.Golden, t.CreatedAt = "", time.Time{}
	refused := func(err error) (api.Template, error) {
		s.cfg.Log.Info("template refused", "template", t.Name, "code", errdefs.Code(err), "error", err.Error())
		return t, err
	}
	if t.Image != "" {
		if err := s.unpackImage(ctx, &t); err != nil {
			return refused(err)
		}
	}
	err := s.validate(&t)
	if err == nil {
		var spec []byte
		if spec, err = json.Marshal(t); err == nil {
			err = s.journal.PutTemplate(ctx, journal.Template{Name: t.Name, Spec: spec})
		}
	}
	if err != nil {
		if rerr := s.removeImage(t); rerr != nil {
			s.cfg.Log.Warn("the bundle of a refused image template was not removed", "template", t.Name, "bundle", t.Bundle, "error", rerr.Error())
		}
		return refused(err)
	}
	return s.Get(ctx, t.Name)
}

// Get reads one template.
func (s *Templates) Get(ctx context.Context, name string) (api.Template, error) {
	rec, err := s.journal.Template(ctx, name)
	if err != nil {
		return api.Template{}, err
	}
	return templateOf(rec)
}

// List lists every template.
func (s *Templates) List(ctx context.Context) ([]api.Template, error) {
	recs, err := s.journal.Templates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Template, 0, len(recs))
	for _, r := range recs {
		t, err := templateOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// Delete removes a template's record and returns it as it was: its golden
// snapshot is the caller's to remove.
func (s *Templates) Delete(ctx context.Context, name string) (api.Template, error) {
	t, err := s.Get(ctx, name)
	if err != nil {
		return t, err
	}
	if err := s.journal.DeleteTemplate(ctx, name); err != nil {
		return t, err
	}
	if err := s.removeImage(t); err != nil {
		s.cfg.Log.Warn("the bundle of a deleted image template was not removed", "template", name, "bundle", t.Bundle, "error", err.Error())
	}
	return t, nil
}

// templateOf is a template's record as the API gives it.
func templateOf(r journal.Template) (api.Template, error) {
	var t api.Template
	if err := json.Unmarshal(r.Spec, &t); err != nil {
		return t, fmt.Errorf("template %s in the journal: %w", r.Name, err)
	}
	t.Golden, t.CreatedAt = r.Golden, r.CreatedAt
	return t, nil
}

// loadBundle reads a bundle template's spec, its root made absolute, and
// checks it against the host path policy: at creation, and again at every
// run, since the folder may have changed since.
func (s *Templates) loadBundle(t api.Template) (*specs.Spec, error) {
	if err := s.cfg.HostPaths.Allows("bundle", t.Bundle, false); err != nil {
		return nil, err
	}
	spec, err := bundle.Load(t.Bundle)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := s.cfg.HostPaths.CheckSpec(spec, t.Bundle); err != nil {
		return nil, err
	}
	if spec.Root != nil && !filepath.IsAbs(spec.Root.Path) {
		spec.Root.Path = filepath.Join(t.Bundle, spec.Root.Path)
	}
	// The actor's bundle is written elsewhere: a guest's kernel and
	// initramfs are named from the template's folder.
	if vm := spec.VM; vm != nil {
		vm.Kernel.Path, vm.Kernel.InitRD = bundle.HostPath(t.Bundle, vm.Kernel.Path), bundle.HostPath(t.Bundle, vm.Kernel.InitRD)
	}
	return spec, nil
}

// WriteBundle writes the actor's OCI bundle under its folder: the
// template's process and rootfs, its memory limit, a host folder per
// durable folder, for GPU templates the NVIDIA devices and the helper, and
// the network namespace netns when set (package network).
func (s *Templates) WriteBundle(t api.Template, a journal.Actor, netns string) (engine.Actor, error) {
	id := a.ID
	dir := s.ActorDir(id)
	bundleDir := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundleDir, 0o700); err != nil {
		return engine.Actor{}, err
	}
	var spec *specs.Spec
	if t.Bundle != "" {
		var err error
		if spec, err = s.loadBundle(t); err != nil {
			return engine.Actor{}, err
		}
	} else if t.VM != nil {
		var err error
		if spec, err = s.vmSpec(t); err != nil {
			return engine.Actor{}, err
		}
	} else {
		if err := s.cfg.HostPaths.Allows("rootfs", t.Rootfs, false); err != nil {
			return engine.Actor{}, err
		}
		spec = &specs.Spec{
			Version:  specs.Version,
			Process:  &specs.Process{Args: t.Args, Cwd: "/", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
			Root:     &specs.Root{Path: t.Rootfs},
			Hostname: id,
			Mounts:   []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
			Linux:    &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, {Type: "network"}}},
		}
	}
	if spec.Process != nil {
		spec.Process.Env = append(spec.Process.Env, t.Env...)
	}
	if spec.Root != nil && t.Runtime != api.RuntimeMicroVM {
		if real, err := filepath.EvalSymlinks(spec.Root.Path); err == nil && real == "/" {
			// The host's root (--allow-host-root): runsc's default rootfs
			// overlay keeps its file store in the rootfs folder itself,
			// which it cannot do in /; the overlay is kept in the
			// sandbox's memory instead (and so in its snapshots).
			if spec.Annotations == nil {
				spec.Annotations = map[string]string{}
			}
			spec.Annotations["dev.gvisor.spec.rootfs.source"] = "/"
			spec.Annotations["dev.gvisor.spec.rootfs.type"] = "bind"
			spec.Annotations["dev.gvisor.spec.rootfs.overlay"] = "memory"
		}
	}
	if spec.Linux == nil {
		spec.Linux = &specs.Linux{}
	}
	if t.MemoryBytes > 0 {
		limit := t.MemoryBytes
		if spec.Linux.Resources == nil {
			spec.Linux.Resources = &specs.LinuxResources{}
		}
		spec.Linux.Resources.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	for i, d := range t.Durable {
		host := filepath.Join(dir, "durable", fmt.Sprint(i))
		if err := os.MkdirAll(host, 0o700); err != nil {
			return engine.Actor{}, err
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: d, Source: host, Type: "bind", Options: []string{"rbind", "rw"}})
	}
	// Checked again: a folder may have become a link elsewhere since.
	if err := s.checkMounts(t); err != nil {
		return engine.Actor{}, err
	}
	for _, m := range t.Mounts {
		mode := "ro"
		if m.ReadWrite {
			mode = "rw"
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.Target, Source: m.Source, Type: "bind", Options: []string{"rbind", mode}})
	}
	// A micro-VM gets its GPU as a device of its own, and its guest agent
	// runs the GPU steps.
	if t.GPUs > 0 && t.Runtime != api.RuntimeMicroVM {
		if err := bundle.PrepareGPU(spec, s.cfg.Helper); err != nil {
			return engine.Actor{}, err
		}
	}
	if netns != "" {
		setNetns(spec, netns)
	}
	if err := bundle.Save(bundleDir, spec); err != nil {
		return engine.Actor{}, err
	}
	return s.EngineActor(t, a), nil
}

// checkMounts refuses a template's mounts that the host path policy does
// not allow, or whose targets are not clean absolute paths given once
// (a durable folder's among them).
func (s *Templates) checkMounts(t api.Template) error {
	if len(t.Mounts) > 0 && t.Runtime == api.RuntimeMicroVM {
		return fmt.Errorf("%w: template %s: mounts are host folders bound into a gVisor sandbox; a micro-VM has none", errdefs.ErrInvalidArgument, t.Name)
	}
	targets := slices.Clone(t.Durable)
	for _, m := range t.Mounts {
		if !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" || slices.Contains(targets, m.Target) {
			return fmt.Errorf("%w: template %s: mount target %q must be a clean absolute path other than /, given once (durable folders included)", errdefs.ErrInvalidArgument, t.Name, m.Target)
		}
		targets = append(targets, m.Target)
		if err := s.cfg.HostPaths.Allows("mount", m.Source, m.ReadWrite); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	return nil
}

// EngineActor is the engine's view of actor a: its current sandbox, its
// bundle and files under the actor's folder.
func (s *Templates) EngineActor(t api.Template, a journal.Actor) engine.Actor {
	id := a.ID
	return engine.Actor{ID: a.Sandbox, Name: id, Bundle: filepath.Join(s.ActorDir(id), "bundle"), GPU: t.GPUs > 0, DurableDirs: t.Durable, ConsoleLog: filepath.Join(s.ActorDir(id), "console.log")}
}

// ActorDir is an actor's folder: its bundle, durable folders and console.
func (s *Templates) ActorDir(id string) string { return filepath.Join(s.cfg.DataDir, "actors", id) }

// setNetns has the sandbox join the network namespace at path.
func setNetns(spec *specs.Spec, path string) {
	for i, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = path
			return
		}
	}
	spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: path})
}
