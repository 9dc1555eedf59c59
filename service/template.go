package service

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/snapshot"
)

// Template is a recipe for actors.
type Template struct {
	Name string `json:"name"`
	// Bundle is an OCI bundle folder (config.json and its rootfs) the
	// actors run; or Rootfs and Args describe the process directly.
	Bundle string   `json:"bundle,omitempty"`
	Rootfs string   `json:"rootfs,omitempty"`
	Args   []string `json:"args,omitempty"`
	Env    []string `json:"env,omitempty"`
	// GPUs gives actors the node's NVIDIA devices and the stasis-cuda
	// helper; a GPU suspend moves their device memory into host memory.
	GPUs int `json:"gpus,omitempty"`
	// MemoryBytes is the sandbox's memory limit; 0 leaves it unlimited.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// Durable are folders inside the sandbox that live on the host, per
	// actor, and that Data snapshots keep.
	Durable   []string       `json:"durable,omitempty"`
	Probe     Probe          `json:"probe"`
	Snapshots SnapshotConfig `json:"snapshots"`
	// Golden is the snapshot new actors start from, once warmed.
	Golden    string    `json:"golden,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Probe says when an actor is ready: a command that exits 0 inside the
// sandbox, or a URL that answers 2xx.
type Probe struct {
	Command        []string `json:"command,omitempty"`
	URL            string   `json:"url,omitempty"`
	TimeoutSeconds float64  `json:"timeoutSeconds,omitempty"`
}

func (p Probe) engine() engine.Probe {
	return engine.Probe{Command: p.Command, URL: p.URL, Timeout: time.Duration(p.TimeoutSeconds * float64(time.Second))}
}

// SnapshotConfig picks the scope of each kind of snapshot: pause keeps one
// on this node for a fast resume, commit (suspend) stores one durably.
// Golden snapshots are always Full.
type SnapshotConfig struct {
	OnPause  snapshot.Scope `json:"onPause,omitempty"`
	OnCommit snapshot.Scope `json:"onCommit,omitempty"`
}

func (t *Template) validate(helper string) error {
	if err := checkName("template", t.Name); err != nil {
		return err
	}
	switch {
	case (t.Bundle == "") == (t.Rootfs == ""):
		return fmt.Errorf("%w: template %s: give either a bundle or a rootfs", ErrInvalid, t.Name)
	case t.Bundle != "":
		if !filepath.IsAbs(t.Bundle) {
			return fmt.Errorf("%w: template %s: bundle %q must be an absolute path", ErrInvalid, t.Name, t.Bundle)
		}
		if _, err := bundle.Load(t.Bundle); err != nil {
			return fmt.Errorf("%w: template %s: %w", ErrInvalid, t.Name, err)
		}
	default:
		if !filepath.IsAbs(t.Rootfs) || len(t.Args) == 0 {
			return fmt.Errorf("%w: template %s: a rootfs template needs an absolute rootfs path and the args to run", ErrInvalid, t.Name)
		}
		if st, err := os.Stat(t.Rootfs); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: template %s: rootfs %s is not a folder", ErrInvalid, t.Name, t.Rootfs)
		}
	}
	if t.GPUs < 0 || t.MemoryBytes < 0 || t.Probe.TimeoutSeconds < 0 {
		return fmt.Errorf("%w: template %s: gpus, memoryBytes and probe.timeoutSeconds cannot be negative", ErrInvalid, t.Name)
	}
	if t.GPUs > 0 && helper == "" {
		return fmt.Errorf("%w: template %s wants GPUs, and stasisd has no stasis-cuda helper to mount (start it with --helper)", ErrInvalid, t.Name)
	}
	for i, d := range t.Durable {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" || slices.Contains(t.Durable[:i], d) {
			return fmt.Errorf("%w: template %s: durable folder %q must be a clean absolute path other than /, given once", ErrInvalid, t.Name, d)
		}
	}
	for _, sc := range []*snapshot.Scope{&t.Snapshots.OnPause, &t.Snapshots.OnCommit} {
		switch *sc {
		case "":
			*sc = snapshot.ScopeFull
		case snapshot.ScopeFull:
		case snapshot.ScopeData:
			if len(t.Durable) == 0 {
				return fmt.Errorf("%w: template %s: Data snapshots keep the durable folders, and it has none", ErrInvalid, t.Name)
			}
		default:
			return fmt.Errorf("%w: template %s: snapshot scope %q: want Full or Data", ErrInvalid, t.Name, *sc)
		}
	}
	return nil
}

// CreateTemplate validates and records a template.
func (s *Service) CreateTemplate(ctx context.Context, t Template) (Template, error) {
	t.Golden, t.CreatedAt = "", time.Time{}
	if err := t.validate(s.cfg.Helper); err != nil {
		return t, err
	}
	spec, err := json.Marshal(t)
	if err != nil {
		return t, err
	}
	if err := s.journal.PutTemplate(ctx, journal.Template{Name: t.Name, Spec: spec}); err != nil {
		return t, err
	}
	return s.Template(ctx, t.Name)
}

// Template reads one template.
func (s *Service) Template(ctx context.Context, name string) (Template, error) {
	rec, err := s.journal.Template(ctx, name)
	if err != nil {
		return Template{}, err
	}
	return templateOf(rec)
}

// Templates lists every template.
func (s *Service) Templates(ctx context.Context) ([]Template, error) {
	recs, err := s.journal.Templates(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Template, 0, len(recs))
	for _, r := range recs {
		t, err := templateOf(r)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func templateOf(r journal.Template) (Template, error) {
	var t Template
	if err := json.Unmarshal(r.Spec, &t); err != nil {
		return t, fmt.Errorf("template %s in the journal: %w", r.Name, err)
	}
	t.Golden, t.CreatedAt = r.Golden, r.CreatedAt
	return t, nil
}

// writeBundle writes the actor's OCI bundle under its folder: the
// template's process and rootfs, its memory limit, a host folder per
// durable folder, and for GPU templates the NVIDIA devices and the helper.
func (s *Service) writeBundle(t Template, id string) (engine.Actor, error) {
	dir := s.actorDir(id)
	bundleDir := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundleDir, 0o700); err != nil {
		return engine.Actor{}, err
	}
	var spec *specs.Spec
	if t.Bundle != "" {
		var err error
		if spec, err = bundle.Load(t.Bundle); err != nil {
			return engine.Actor{}, err
		}
		if spec.Root != nil && !filepath.IsAbs(spec.Root.Path) {
			spec.Root.Path = filepath.Join(t.Bundle, spec.Root.Path)
		}
	} else {
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
		if err := os.MkdirAll(host, 0o755); err != nil {
			return engine.Actor{}, err
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: d, Source: host, Type: "bind", Options: []string{"rbind", "rw"}})
	}
	if t.GPUs > 0 {
		if err := bundle.PrepareGPU(spec, s.cfg.Helper); err != nil {
			return engine.Actor{}, err
		}
	}
	if err := bundle.Save(bundleDir, spec); err != nil {
		return engine.Actor{}, err
	}
	return s.engineActor(t, id), nil
}

func (s *Service) engineActor(t Template, id string) engine.Actor {
	return engine.Actor{ID: id, Bundle: filepath.Join(s.actorDir(id), "bundle"), GPU: t.GPUs > 0, DurableDirs: t.Durable, ConsoleLog: filepath.Join(s.actorDir(id), "console.log")}
}
