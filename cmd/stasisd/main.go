// Command stasisd is Stasis's node service: actors made from templates,
// suspended, paused and resumed through an API on a unix socket, with every
// operation journaled in SQLite so that no actor is ever left half-way
// (docs/service.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/gpu/nvml"
	"github.com/stasis-run/stasis/internal/buildinfo"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/location"
)

// Defaults: everything under one data folder, the socket under /run.
const (
	DefaultDataDir = "/var/lib/stasis"
	DefaultSocket  = "/run/stasis/stasisd.sock"
)

type options struct {
	data, socket, socketMode, repo, helper, kernelPolicy, logFormat string
	noStore, version                                                bool
	runsc                                                           gvisor.Config
}

func main() {
	var o options
	fs := flag.NewFlagSet("stasisd", flag.ExitOnError)
	fs.StringVar(&o.data, "data", DefaultDataDir, "data folder: journal, actors, local snapshots and the embedded store")
	fs.StringVar(&o.socket, "socket", DefaultSocket, "unix socket the API listens on")
	fs.StringVar(&o.socketMode, "socket-mode", "0600", "permissions of the socket (octal)")
	fs.StringVar(&o.repo, "repo", "", "snapshot store: a folder or s3://BUCKET/PREFIX?endpoint=HOST:PORT (default: DATA/store)")
	fs.BoolVar(&o.noStore, "no-store", false, "keep every snapshot on this node; suspend stores nothing")
	fs.StringVar(&o.helper, "helper", "", "stasis-cuda on this host, mounted into GPU actors (default: stasis-cuda next to stasisd)")
	fs.StringVar(&o.kernelPolicy, "kernel-policy", string(compat.KernelAny), "host kernel release a Full snapshot's restore requires: any, minor or exact")
	fs.StringVar(&o.logFormat, "log-format", "json", "log format on stderr: json or text")
	fs.StringVar(&o.runsc.Runsc, "runsc", "", "runsc binary (default: runsc on PATH)")
	fs.StringVar(&o.runsc.Root, "runsc-root", "", "runsc state folder (default: DATA/runsc)")
	fs.StringVar(&o.runsc.Platform, "platform", "systrap", "runsc platform")
	fs.StringVar(&o.runsc.Network, "network", "", "runsc network: sandbox, host or none (default: runsc's)")
	fs.StringVar(&o.runsc.NvproxyDriverVersion, "nvproxy-driver-version", "", "driver ABI for GPU sandboxes when runsc does not know the host's driver")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	_ = fs.Parse(os.Args[1:])
	if o.version {
		fmt.Println("stasisd", buildinfo.Version())
		return
	}
	var handler slog.Handler = slog.NewJSONHandler(os.Stderr, nil)
	if o.logFormat == "text" {
		handler = slog.NewTextHandler(os.Stderr, nil)
	}
	log := slog.New(handler)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, log); err != nil {
		log.Error("stasisd stopped", "error", err.Error())
		fmt.Fprintln(os.Stderr, "stasisd:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	mode, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil {
		return fmt.Errorf("--socket-mode %q: want octal permissions such as 0600", o.socketMode)
	}
	policy, err := compat.ParseKernelRule(o.kernelPolicy)
	if err != nil {
		return fmt.Errorf("--kernel-policy: %w", err)
	}
	if o.runsc.Root == "" {
		o.runsc.Root = filepath.Join(o.data, "runsc")
	}
	rt, err := gvisor.New(ctx, o.runsc)
	if err != nil {
		return err
	}
	var repo *store.Repository
	if !o.noStore {
		loc := o.repo
		if loc == "" {
			loc = filepath.Join(o.data, "store")
		}
		if repo, err = location.Repository(ctx, loc, o.repo == ""); err != nil {
			return fmt.Errorf("snapshot store: %w (create it with `stasis store init --repo %s`, or run with --no-store)", err, loc)
		}
	}
	gpus := nvml.New()
	svc, err := service.New(ctx, service.Config{
		DataDir:   o.data,
		Engine:    &engine.Engine{Runtime: rt, GPU: gpus, Policy: compat.Policy{Kernel: policy}},
		Repo:      repo,
		Helper:    helperPath(o.helper),
		Log:       log,
		Failpoint: os.Getenv("STASIS_FAILPOINT"),
		Node: func(ctx context.Context) (node.Fingerprint, error) {
			return node.Collector{GPU: gpus, Runtime: rt.Info(), CheckpointAPI: cuda.CheckpointAPI}.Collect(ctx)
		},
	})
	if err != nil {
		return err
	}
	defer svc.Close()
	start := time.Now()
	if err := svc.Reconcile(ctx); err != nil {
		return err
	}
	log.Info("journal reconciled", "duration", time.Since(start).String())
	ln, err := listen(o.socket, os.FileMode(mode))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api.Handler(svc), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		// Operations in flight run to their end; the listener closes now.
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("stasisd serving", "socket", o.socket, "data", o.data, "version", buildinfo.Version())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listen opens the socket, replacing a stale one but never a live one.
func listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if conn, err := net.Dial("unix", path); err == nil {
		conn.Close()
		return nil, fmt.Errorf("another stasisd is serving on %s", path)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket permissions: %w", err)
	}
	return ln, nil
}

// helperPath is the configured helper, or stasis-cuda next to stasisd.
func helperPath(configured string) string {
	if configured != "" {
		return configured
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	next := filepath.Join(filepath.Dir(self), "stasis-cuda")
	if _, err := os.Stat(next); err != nil {
		return ""
	}
	return next
}
