// Package demo walks an actor through run, suspend and resume through
// stasisd, on embedded defaults: the quick start's main job. The CPU actor is
// the counter of internal/counter, run by the stasis binary itself in a
// gVisor sandbox whose filesystem is the host's /usr and /etc, read-only;
// the GPU actor is scripts/gpu/holder_server.py, a PyTorch process holding
// device memory filled with a known pattern. The bundles live in stasisd's
// templates folder, with the programs they run copied in, so that the demo
// needs no host path beyond stasisd's defaults.
package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/internal/fsutil"
)

// ActorCommand is the stasis subcommand that runs the counter.
const ActorCommand = "demo-actor"

// binaryPath is where the stasis binary sits inside the demo sandbox.
const binaryPath = "/.stasis/bin/stasis"

// Config is what the demo needs.
type Config struct {
	Client *api.Client
	// TemplatesDir is stasisd's templates folder, where the demo's bundles
	// go.
	TemplatesDir string
	// Binary is the stasis executable, copied into the sandbox's root
	// filesystem to run the counter.
	Binary string
	// GPU runs the GPU demo instead.
	GPU *GPU
	// Follow runs an operation on an actor while showing its progress.
	Follow func(ctx context.Context, id string, op func(context.Context) error) error
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
		if err := cfg.Follow(ctx, id, func(ctx context.Context) error {
			_, err := c.Delete(ctx, api.DeleteRequest{ID: id, Purge: true})
			return err
		}); err != nil {
			return res, err
		}
	}
	if err := cfg.Follow(ctx, id, func(ctx context.Context) error {
		_, err := c.Run(ctx, api.RunRequest{Template: tpl.Name, ID: id, Cold: true})
		return err
	}); err != nil {
		return res, err
	}
	defer func() {
		_, _ = c.Delete(context.WithoutCancel(ctx), api.DeleteRequest{ID: id})
	}()
	var err error
	if res.Before, err = cfg.giveState(ctx, id); err != nil {
		return res, err
	}
	cfg.Say("actor %s is running; %s", id, cfg.stateWords(res.Before))

	start := time.Now()
	var a api.Actor
	err = cfg.Follow(ctx, id, func(ctx context.Context) (err error) {
		a, err = c.Suspend(ctx, api.OpRequest{ID: id})
		return err
	})
	if err != nil {
		return res, err
	}
	res.Suspend = time.Since(start)
	if a.State != api.Suspended || a.Snapshot == nil {
		return res, fmt.Errorf("after suspend the actor is %s (%s)", a.State, a.Reason)
	}
	res.Snapshot, res.SnapshotDir, res.Stored, res.SnapshotBytes = a.Snapshot.ID, a.Snapshot.Dir, a.Snapshot.Stored, a.Snapshot.SizeBytes
	cfg.Say("suspended in %s: snapshot %s (%d bytes) stored as %s; the sandbox is gone", res.Suspend.Round(time.Millisecond), res.Snapshot, res.SnapshotBytes, res.Stored)

	start = time.Now()
	if err := cfg.Follow(ctx, id, func(ctx context.Context) error {
		_, err := c.Resume(ctx, api.OpRequest{ID: id})
		return err
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

// template is the demo template, its bundle in stasisd's templates folder.
func (cfg Config) template() api.Template {
	dir := filepath.Join(cfg.TemplatesDir, "stasis-demo")
	if cfg.GPU != nil {
		return api.Template{Name: "stasis-demo-gpu", Bundle: dir + "-gpu", GPUs: 1,
			Probe: api.Probe{Command: []string{cfg.GPU.Python, "/stasis-scripts/holder_client.py", "info"}, TimeoutSeconds: 300}}
	}
	return api.Template{Name: "stasis-demo", Bundle: dir, Probe: api.Probe{Command: []string{binaryPath, ActorCommand, "await", "get"}, TimeoutSeconds: 30}}
}

// WriteBundle writes the demo template's OCI bundle: the host's /usr (and
// /opt for the GPU demo) read-only, and the program it runs copied into
// the bundle's root filesystem.
func (cfg Config) WriteBundle() error {
	t := cfg.template()
	if err := os.MkdirAll(t.Bundle, 0o700); err != nil {
		return err
	}
	args := []string{binaryPath, ActorCommand, "serve"}
	dirs := []string{"/usr"}
	if cfg.GPU != nil {
		args = []string{cfg.GPU.Python, "/stasis-scripts/holder_server.py", fmt.Sprint(cfg.GPU.GiB)}
		dirs = append(dirs, "/opt")
	}
	spec, err := bundle.HostSpec(t.Bundle, dirs, args)
	if err != nil {
		return err
	}
	rootfs := filepath.Join(t.Bundle, "rootfs")
	if cfg.GPU != nil {
		spec.Process.Env = append(spec.Process.Env, "HOME=/tmp", "PYTHONUNBUFFERED=1", "LD_LIBRARY_PATH=/usr/local/nvidia/lib64")
		for _, name := range []string{"holder_server.py", "holder_client.py", "holder.py"} {
			if err := copyInto(filepath.Join(cfg.GPU.Scripts, name), filepath.Join(rootfs, "stasis-scripts", name), 0o644); err != nil {
				return err
			}
		}
	} else if err := copyInto(cfg.Binary, filepath.Join(rootfs, binaryPath), 0o755); err != nil {
		return err
	}
	return bundle.Save(t.Bundle, spec)
}

// copyInto replaces dst with a copy of src.
func copyInto(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return fsutil.CopyFile(src, dst, mode)
}

func (cfg Config) exec(ctx context.Context, id string, args ...string) (string, error) {
	res, err := cfg.Client.Exec(ctx, api.ExecRequest{ID: id, Args: args})
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
