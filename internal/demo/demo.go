// Package demo walks an actor through run, suspend and resume through
// stasisd, on embedded defaults: the quick start's main job. The CPU actor is
// the counter of internal/counter, run by the stasis binary itself in a
// gVisor sandbox whose filesystem is the host's /usr and /etc, read-only;
// the GPU actor is scripts/gpu/holder_server.py, a PyTorch process holding
// device memory filled with a known pattern.
package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/service"
)

// ActorCommand is the stasis subcommand that runs the counter.
const ActorCommand = "demo-actor"

// binaryPath is where the stasis binary sits inside the demo sandbox.
const binaryPath = "/.stasis/bin/stasis"

// Config is what the demo needs.
type Config struct {
	Client *api.Client
	// DataDir holds the demo template's bundle.
	DataDir string
	// Binary is the stasis executable, mounted into the sandbox to run the
	// counter.
	Binary string
	// GPU runs the GPU demo instead.
	GPU *GPU
	// Follow runs an operation while showing its progress.
	Follow func(ctx context.Context, id string, op func(context.Context) (service.Actor, error)) (service.Actor, error)
	// Say prints the demo's narration.
	Say func(format string, args ...any)
}

// GPU is the GPU demo's actor: holder_server.py under Python, holding GiB
// of device memory.
type GPU struct {
	Python  string
	Scripts string
	GiB     float64
}

// Result is what the demo showed.
type Result struct {
	Actor          string        `json:"actor"`
	Snapshot       string        `json:"snapshot"`
	SnapshotDir    string        `json:"snapshotDir"`
	Stored         string        `json:"stored"`
	SnapshotBytes  int64         `json:"snapshotBytes"`
	Before         string        `json:"before"`
	After          string        `json:"after"`
	StatePreserved bool          `json:"statePreserved"`
	Suspend        time.Duration `json:"suspendNs"`
	Resume         time.Duration `json:"resumeNs"`
}

// Run makes the demo template (once), starts an actor of it, gives it some
// state in memory, suspends it (the sandbox goes, the snapshot is stored),
// resumes it and shows the state kept. The actor is deleted at the end;
// its snapshot stays in the store.
func Run(ctx context.Context, cfg Config) (Result, error) {
	id, tpl := "stasis-demo", cfg.template()
	if cfg.GPU != nil {
		id = "stasis-demo-gpu"
	}
	res := Result{Actor: id}
	c := cfg.Client
	if _, err := c.CreateTemplate(ctx, tpl); err != nil && !isCode(err, "already_exists") {
		return res, err
	}
	// A demo actor left behind by an interrupted run is removed first.
	if _, err := c.InspectActor(ctx, id); err == nil {
		if _, err := cfg.Follow(ctx, id, func(ctx context.Context) (service.Actor, error) {
			return c.Op(ctx, "Delete", service.OpRequest{ID: id, Purge: true})
		}); err != nil {
			return res, err
		}
	}
	if _, err := cfg.Follow(ctx, id, func(ctx context.Context) (service.Actor, error) {
		return c.Run(ctx, service.RunRequest{Template: tpl.Name, ID: id, Cold: true})
	}); err != nil {
		return res, err
	}
	defer func() {
		_, _ = c.Op(context.WithoutCancel(ctx), "Delete", service.OpRequest{ID: id})
	}()
	var err error
	if res.Before, err = cfg.giveState(ctx, id); err != nil {
		return res, err
	}
	cfg.Say("actor %s is running; %s", id, cfg.stateWords(res.Before))

	start := time.Now()
	a, err := cfg.Follow(ctx, id, func(ctx context.Context) (service.Actor, error) {
		return c.Op(ctx, "Suspend", service.OpRequest{ID: id})
	})
	if err != nil {
		return res, err
	}
	res.Suspend = time.Since(start)
	if a.State != service.Suspended || a.Snapshot == nil {
		return res, fmt.Errorf("after suspend the actor is %s (%s)", a.State, a.Reason)
	}
	res.Snapshot, res.SnapshotDir, res.Stored, res.SnapshotBytes = a.Snapshot.ID, a.Snapshot.Dir, a.Snapshot.Stored, a.Snapshot.SizeBytes
	cfg.Say("suspended in %s: snapshot %s (%d bytes) stored as %s; the sandbox is gone", res.Suspend.Round(time.Millisecond), res.Snapshot, res.SnapshotBytes, res.Stored)

	start = time.Now()
	if _, err := cfg.Follow(ctx, id, func(ctx context.Context) (service.Actor, error) {
		return c.Op(ctx, "Resume", service.OpRequest{ID: id})
	}); err != nil {
		return res, err
	}
	res.Resume = time.Since(start)
	if res.After, err = cfg.checkState(ctx, id); err != nil {
		return res, err
	}
	res.StatePreserved = cfg.preserved(res.Before, res.After)
	cfg.Say("resumed in %s; %s", res.Resume.Round(time.Millisecond), cfg.stateWords(res.After))
	if !res.StatePreserved {
		return res, fmt.Errorf("state lost: before suspend %q, after resume %q", res.Before, res.After)
	}
	cfg.Say("state preserved: the same process went on where it was")
	return res, nil
}

func isCode(err error, code string) bool {
	var apiErr *api.Error
	return errors.As(err, &apiErr) && apiErr.Code == code
}

// template writes the demo template's bundle under the data folder.
func (cfg Config) template() service.Template {
	dir := filepath.Join(cfg.DataDir, "demo", "bundle")
	if cfg.GPU != nil {
		dir = filepath.Join(cfg.DataDir, "demo", "bundle-gpu")
		return service.Template{Name: "stasis-demo-gpu", Bundle: dir, GPUs: 1,
			Probe: service.Probe{Command: []string{cfg.GPU.Python, "/stasis-scripts/holder_client.py", "info"}, TimeoutSeconds: 300}}
	}
	return service.Template{Name: "stasis-demo", Bundle: dir, Probe: service.Probe{Command: []string{binaryPath, ActorCommand, "await", "get"}, TimeoutSeconds: 30}}
}

// WriteBundle writes the demo template's OCI bundle.
func (cfg Config) WriteBundle() error {
	t := cfg.template()
	if err := os.MkdirAll(t.Bundle, 0o700); err != nil {
		return err
	}
	args := []string{binaryPath, ActorCommand, "serve"}
	dirs := []string{"/usr", "/etc"}
	if cfg.GPU != nil {
		args = []string{cfg.GPU.Python, "/stasis-scripts/holder_server.py", fmt.Sprint(cfg.GPU.GiB)}
		dirs = append(dirs, "/opt")
		if _, err := os.Stat("/usr/local/nvidia"); err == nil {
			dirs = append(dirs, "/usr/local/nvidia")
		}
	}
	spec, err := bundle.HostSpec(t.Bundle, dirs, args)
	if err != nil {
		return err
	}
	if cfg.GPU != nil {
		spec.Process.Env = append(spec.Process.Env, "HOME=/tmp", "PYTHONUNBUFFERED=1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64")
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/stasis-scripts", Source: cfg.GPU.Scripts, Type: "bind", Options: []string{"bind", "ro"}})
	} else {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: binaryPath, Source: cfg.Binary, Type: "bind", Options: []string{"bind", "ro"}})
	}
	return bundle.Save(t.Bundle, spec)
}

func (cfg Config) exec(ctx context.Context, id string, args ...string) (string, error) {
	res, err := cfg.Client.Exec(ctx, service.ExecRequest{ID: id, Args: args})
	if err != nil {
		return "", err
	}
	out := strings.TrimSpace(res.Stdout)
	if res.ExitCode != 0 {
		return out, fmt.Errorf("%s exited %d: %s %s", strings.Join(args, " "), res.ExitCode, out, strings.TrimSpace(res.Stderr))
	}
	return out, nil
}

// giveState counts to 3 (CPU), or reads the holder's pid and size (GPU).
func (cfg Config) giveState(ctx context.Context, id string) (string, error) {
	if cfg.GPU != nil {
		return cfg.exec(ctx, id, cfg.GPU.Python, "/stasis-scripts/holder_client.py", "info")
	}
	var last string
	for range 3 {
		var err error
		if last, err = cfg.exec(ctx, id, binaryPath, ActorCommand, "await", "incr"); err != nil {
			return "", err
		}
	}
	return last, nil
}

// checkState counts once more (CPU), or checks every byte of device memory
// and answers with the holder's pid and size again (GPU).
func (cfg Config) checkState(ctx context.Context, id string) (string, error) {
	if cfg.GPU != nil {
		if _, err := cfg.exec(ctx, id, cfg.GPU.Python, "/stasis-scripts/holder_client.py", "verify"); err != nil {
			return "", err
		}
		return cfg.exec(ctx, id, cfg.GPU.Python, "/stasis-scripts/holder_client.py", "info")
	}
	return cfg.exec(ctx, id, binaryPath, ActorCommand, "await", "incr")
}

func (cfg Config) preserved(before, after string) bool {
	if cfg.GPU != nil {
		return before == after
	}
	beforeID, beforeCount, _ := strings.Cut(before, " ")
	afterID, afterCount, _ := strings.Cut(after, " ")
	return beforeID == afterID && beforeCount == "3" && afterCount == "4"
}

func (cfg Config) stateWords(s string) string {
	if cfg.GPU != nil {
		return fmt.Sprintf("its PyTorch process holds device memory filled with a pattern (%s: process id, bytes; verified bit for bit after the resume)", s)
	}
	return fmt.Sprintf("its counter, held in memory only, says %s (process id, count)", s)
}
