// Package demo walks an actor through suspend and resume on embedded
// defaults: the quick start's main job. The actor is the counter of
// internal/counter, run by the stasis binary itself in a gVisor sandbox whose
// filesystem is the host's /usr and /etc, read-only.
package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// ActorCommand is the stasis subcommand that runs the counter.
const ActorCommand = "demo-actor"

// binaryPath is where the stasis binary sits inside the demo sandbox.
const binaryPath = "/.stasis/bin/stasis"

// Config is what the demo needs.
type Config struct {
	// DataDir holds the demo's bundle and snapshots.
	DataDir string
	// Binary is the stasis executable, mounted into the sandbox to run the
	// counter.
	Binary  string
	Runtime runtime.Runtime
	// Events hears of every engine step as it ends.
	Events func(engine.Event)
	// Say prints the demo's narration.
	Say func(format string, args ...any)
}

// Result is what the demo showed.
type Result struct {
	Actor          string        `json:"actor"`
	Snapshot       string        `json:"snapshot"`
	SnapshotBytes  int64         `json:"snapshotBytes"`
	Before         string        `json:"before"`
	After          string        `json:"after"`
	StatePreserved bool          `json:"statePreserved"`
	Suspend        time.Duration `json:"suspendNs"`
	Resume         time.Duration `json:"resumeNs"`
}

// Run creates the demo actor, counts to 3, suspends it, shows the sandbox is
// gone, resumes it and counts once more: the count goes on from 3 in the same
// process. The actor is deleted at the end.
func Run(ctx context.Context, cfg Config) (Result, error) {
	const id = "stasis-demo"
	var res Result
	res.Actor = id
	bundleDir := filepath.Join(cfg.DataDir, "demo", "bundle")
	if err := os.MkdirAll(bundleDir, 0o700); err != nil {
		return res, err
	}
	spec, err := bundle.HostSpec(bundleDir, []string{"/usr", "/etc"}, []string{binaryPath, ActorCommand, "serve"})
	if err != nil {
		return res, err
	}
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: binaryPath, Source: cfg.Binary, Type: "bind", Options: []string{"bind", "ro"}})
	if err := bundle.Save(bundleDir, spec); err != nil {
		return res, err
	}

	rt := cfg.Runtime
	// A demo left behind by an interrupted run is removed first.
	if err := rt.Delete(ctx, id); err != nil {
		return res, err
	}
	a := engine.Actor{ID: id, Bundle: bundleDir, ConsoleLog: filepath.Join(cfg.DataDir, "demo", "console.log")}
	defer func() { _ = rt.Delete(context.WithoutCancel(ctx), id) }()
	if err := rt.Create(ctx, id, bundleDir, runtime.CreateOptions{ConsoleLog: a.ConsoleLog}); err != nil {
		return res, err
	}
	if err := rt.Start(ctx, id); err != nil {
		return res, err
	}
	ask := func(cmd string) (string, error) {
		out, err := rt.Exec(ctx, id, runtime.Process{Args: []string{binaryPath, ActorCommand, "await", cmd}})
		if err != nil {
			return "", err
		}
		if out.ExitCode != 0 {
			return "", fmt.Errorf("counter %s exited %d: %s", cmd, out.ExitCode, bytes.TrimSpace(out.Stderr))
		}
		return strings.TrimSpace(string(out.Stdout)), nil
	}
	for range 3 {
		if res.Before, err = ask("incr"); err != nil {
			return res, err
		}
	}
	cfg.Say("actor %s is running; its counter, held in memory only, says %s (process id, count)", id, res.Before)

	res.Snapshot = filepath.Join(cfg.DataDir, "demo", "snapshots", time.Now().UTC().Format("20060102T150405.000000000Z"))
	eng := &engine.Engine{Runtime: rt, Events: cfg.Events}
	start := time.Now()
	m, err := eng.Suspend(ctx, a, engine.SuspendOptions{Dir: res.Snapshot, Scope: snapshot.ScopeFull})
	if err != nil {
		return res, err
	}
	res.Suspend = time.Since(start)
	res.SnapshotBytes = m.Size()
	if _, err := rt.State(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		return res, fmt.Errorf("the sandbox still exists after suspend: %v", err)
	}
	cfg.Say("suspended in %s into %s (%d bytes); the sandbox is gone", res.Suspend.Round(time.Millisecond), res.Snapshot, res.SnapshotBytes)

	start = time.Now()
	if err := eng.Resume(ctx, a, res.Snapshot, engine.ResumeOptions{}); err != nil {
		return res, err
	}
	res.Resume = time.Since(start)
	if res.After, err = ask("incr"); err != nil {
		return res, err
	}
	beforeID, beforeCount, _ := strings.Cut(res.Before, " ")
	afterID, afterCount, _ := strings.Cut(res.After, " ")
	res.StatePreserved = beforeID == afterID && beforeCount == "3" && afterCount == "4"
	cfg.Say("resumed in %s; one more count says %s", res.Resume.Round(time.Millisecond), res.After)
	if !res.StatePreserved {
		return res, fmt.Errorf("state lost: before suspend %q, after resume %q; want the same process counting on to 4", res.Before, res.After)
	}
	cfg.Say("state preserved: the same process counted on from 3 to 4")
	return res, nil
}
