package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/cmd/internal/compose"
	"github.com/stasis-run/stasis/internal/fencefile"
	"github.com/stasis-run/stasis/internal/lockfile"
)

// watchdogInterval is how often the watchdog reads the lease's lapse.
const watchdogInterval = 100 * time.Millisecond

// newWatchdog is `stasisd watchdog`: the fence that outlives stasisd and
// the fleet agent. stasisd starts it (detached, in a session of its own)
// when it holds a fleet lease, and again at any renewal that finds it gone;
// it holds nothing but the lease's lapse and the commands that freeze the
// fleet actors' sandboxes, which stasisd hands over (package fencefile),
// and runs those commands when the lapse passes: the actors stop running
// before the cluster starts them elsewhere, even with stasisd and the agent
// both dead or hung. It ends when the lease is given up (no file).
func newWatchdog() *cobra.Command {
	var data string
	cmd := &cobra.Command{
		Use:   "watchdog",
		Short: "Freeze this node's fleet actors when its fleet lease lapses, whether or not stasisd runs (stasisd starts it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("component", "watchdog")
			lock, err := lockfile.Acquire(fencefile.LockPath(data), true, lockfile.Holder("stasisd watchdog"))
			if errors.Is(err, lockfile.ErrLocked) {
				return nil // one watches already
			}
			if err != nil {
				return err
			}
			defer lock.Release()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watch(ctx, fencefile.Path(data), log)
		},
	}
	cmd.Flags().StringVar(&data, "data", compose.DefaultDataDir, "stasisd's data folder")
	return cmd
}

// watch runs the fence commands of the lease handed over in path once per
// lapse, until the lease is given up or ctx ends.
func watch(ctx context.Context, path string, log *slog.Logger) error {
	log.Info("watching the fleet lease", "file", path)
	var fencedFor int64
	t := time.NewTicker(watchdogInterval)
	defer t.Stop()
	for {
		f, held, err := fencefile.Read(path)
		switch {
		case err != nil:
			log.Warn("the lease's file could not be read", "error", err.Error())
		case !held:
			log.Info("no fleet lease: the watchdog ends")
			return nil
		case fencefile.Now() >= f.Until && f.Until != fencedFor:
			fencedFor = f.Until
			log.Warn("the fleet lease lapsed: freezing the fleet actors' sandboxes", "holder", f.Holder, "sandboxes", len(f.Commands))
			fencefile.Run(ctx, f.Commands, log)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// startWatchdog starts `stasisd watchdog` for the data folder when none
// runs (its lock is free): detached, in a session of its own, so that it
// outlives this process, its log appended to DATA/fence/watchdog.log.
func startWatchdog(data string) func() error {
	var mu sync.Mutex
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		lock, err := lockfile.Acquire(fencefile.LockPath(data), true, lockfile.Holder("stasisd, looking for its watchdog"))
		if errors.Is(err, lockfile.ErrLocked) {
			return nil // it runs
		}
		if err != nil {
			return err
		}
		if err := lock.Release(); err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		logFile, err := os.OpenFile(filepath.Join(filepath.Dir(fencefile.LockPath(data)), "watchdog.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer logFile.Close()
		cmd := exec.Command(self, "watchdog", "--data", data)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s watchdog: %w", self, err)
		}
		go func() { _ = cmd.Wait() }() // reaped if it ends while this process runs
		return nil
	}
}
