// Package compose is where Stasis's parts are put together for its two
// programs, stasisd and the stasis CLI: the defaults (defined here once),
// the flags both take, and the runtime, engine, fingerprint and store
// built from them. Both programs see the same data folder, runsc state
// folder and store unless told otherwise, so that the CLI acts on what
// stasisd runs.
package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/gpu/nvml"
	"github.com/stasis-run/stasis/internal/lockfile"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/location"
)

// The defaults: everything under one data folder, the socket under /run.
const (
	DefaultDataDir  = "/var/lib/stasis"
	DefaultSocket   = api.DefaultSocket
	DefaultPlatform = "systrap"
)

// Options are the settings both programs share, as flags.
type Options struct {
	DataDir string
	// Repo is the store's location; DATA/store when empty.
	Repo         string
	Socket       string
	KernelPolicy string
	Runsc        gvisor.Config
	// GPUPath, DirectIO, ExcludeZeroPages and CUDASequential tune the
	// engine (engine.Engine's fields of those names; ExcludeZeroPages is
	// the opposite of its KeepZeroPages).
	GPUPath                                    string
	DirectIO, ExcludeZeroPages, CUDASequential bool
	// MemoryLoad is engine.Engine's MemoryLoad, as ParseMemoryLoad reads it.
	MemoryLoad string
}

// Register adds every shared flag to fs: stasisd takes them all; the CLI
// gives each command those it uses.
func (o *Options) Register(fs *pflag.FlagSet) {
	o.RegisterData(fs)
	o.RegisterSocket(fs)
	o.RegisterStore(fs)
	o.RegisterRuntime(fs)
}

// The environment variables that, where set, stand in for the defaults of
// --data and --socket, for stasisd and every command alike: set once, as
// docker's DOCKER_HOST, rather than on every command line.
const (
	DataEnv   = "STASIS_DATA"
	SocketEnv = "STASIS_SOCKET"
)

// envOr is the environment variable key where it is set, else def.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// RegisterData adds --data, which every command's defaults start from.
func (o *Options) RegisterData(fs *pflag.FlagSet) {
	fs.StringVar(&o.DataDir, "data", envOr(DataEnv, DefaultDataDir), "data folder: journal, actors, local snapshots and the embedded store ($"+DataEnv+" where set)")
}

// RegisterSocket adds --socket, for the commands that talk to stasisd.
func (o *Options) RegisterSocket(fs *pflag.FlagSet) {
	fs.StringVar(&o.Socket, "socket", envOr(SocketEnv, DefaultSocket), "stasisd's API socket ($"+SocketEnv+" where set)")
}

// RegisterStore adds --repo, for the commands that use the snapshot store.
func (o *Options) RegisterStore(fs *pflag.FlagSet) {
	fs.StringVar(&o.Repo, "repo", "", "snapshot store: a folder, s3://BUCKET/PREFIX?endpoint=HOST:PORT or gs://BUCKET/PREFIX (default: DATA/store)")
}

// RegisterRuntime adds the runsc, image and GPU options, for the commands
// that drive sandboxes or read the node's facts themselves.
func (o *Options) RegisterRuntime(fs *pflag.FlagSet) {
	fs.StringVar(&o.KernelPolicy, "kernel-policy", string(compat.KernelAny), "how much of the host kernel release a Full snapshot's restore requires: any, minor (same major.minor) or exact")
	fs.StringVar(&o.Runsc.Runsc, "runsc", "", "runsc binary (default: runsc on PATH)")
	fs.StringVar(&o.Runsc.Root, "runsc-root", "", "runsc state folder (default: DATA/runsc)")
	fs.StringVar(&o.Runsc.Platform, "platform", DefaultPlatform, "runsc platform")
	fs.StringVar(&o.Runsc.Network, "network", "", "runsc network: sandbox, host or none (default: runsc's)")
	fs.StringVar(&o.Runsc.NvproxyDriverVersion, "nvproxy-driver-version", "", "driver ABI for GPU sandboxes when runsc does not know the host's driver")
	fs.StringVar(&o.GPUPath, "gpu-path", "exec", "how a GPU suspend moves device memory: exec (stasis-cuda run through runsc exec; the faster, measured) or runtime (runsc --cuda-checkpoint-path runs stasis-cuda itself)")
	fs.BoolVar(&o.DirectIO, "direct-io", false, "write and read checkpoint images around the page cache where runsc can (--direct)")
	fs.BoolVar(&o.ExcludeZeroPages, "exclude-zero-pages", true, "leave committed zero pages out of checkpoint images where runsc can (--exclude-zero-pages=false writes them)")
	fs.StringVar(&o.MemoryLoad, "memory-load", "auto", "how a restore loads the image's memory: eager (all of it before the sandbox runs), background (while it runs) or auto (eager for a GPU actor whose image is in the page cache while sandbox memory is in huge pages, background otherwise; measured the faster in each case)")
	fs.BoolVar(&o.CUDASequential, "cuda-sequential", false, "with the runtime GPU path, checkpoint and restore CUDA processes one at a time")
}

// AbsolutePaths makes the data folder, the socket, runsc's state folder and
// a store in a folder absolute, from the working folder, when given
// relative: what stasisd records, and the paths a command hands stasisd
// (a demo's bundle), name the same places wherever they are read from.
// A relative --data was refused only later, by the host path policy,
// once the folders were made.
func (o *Options) AbsolutePaths() error {
	paths := []*string{&o.DataDir, &o.Socket, &o.Runsc.Root}
	if o.Repo != "" && !strings.Contains(o.Repo, "://") {
		paths = append(paths, &o.Repo)
	}
	for _, p := range paths {
		if *p == "" || filepath.IsAbs(*p) {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("%s: %w", *p, err)
		}
		*p = abs
	}
	return nil
}

// RunscRoot is runsc's state folder.
func (o Options) RunscRoot() string {
	if o.Runsc.Root != "" {
		return o.Runsc.Root
	}
	return filepath.Join(o.DataDir, "runsc")
}

// TemplatesDir is the folder in the data folder that templates may use
// read-only: where the demo writes its bundles, and a place for an
// operator's.
func (o Options) TemplatesDir() string { return filepath.Join(o.DataDir, "templates") }

// RepoLocation is the store's location.
func (o Options) RepoLocation() string {
	if o.Repo != "" {
		return o.Repo
	}
	return filepath.Join(o.DataDir, "store")
}

// OpenRepo opens the store, creating the embedded local one on first use;
// any other location must be created with `stasis store init`.
func (o Options) OpenRepo(ctx context.Context) (*store.Repository, error) {
	r, err := location.Repository(ctx, o.RepoLocation(), o.Repo == "")
	if err != nil {
		// store.Open says when there is no repository there, and how to
		// make one; anything else is the store's own failure.
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	return r, nil
}

// Policy is the compatibility policy.
func (o Options) Policy() (compat.Policy, error) {
	rule, err := compat.ParseKernelRule(o.KernelPolicy)
	if err != nil {
		return compat.Policy{}, fmt.Errorf("--kernel-policy: %w", err)
	}
	return compat.Policy{Kernel: rule}, nil
}

// Runtime is runsc as configured.
func (o Options) Runtime(ctx context.Context) (*gvisor.Runsc, error) {
	cfg := o.Runsc
	cfg.Root = o.RunscRoot()
	return gvisor.New(ctx, cfg)
}

// GPU is this node's GPU source.
func GPU() gpu.Source { return nvml.New() }

// Engine is an engine on runsc that reads this node's GPUs through NVML.
func (o Options) Engine(ctx context.Context) (*engine.Engine, error) {
	policy, err := o.Policy()
	if err != nil {
		return nil, err
	}
	path, err := engine.ParseGPUPath(o.GPUPath)
	if err != nil {
		return nil, fmt.Errorf("--gpu-path: %w", err)
	}
	load, err := engine.ParseMemoryLoad(o.MemoryLoad)
	if err != nil {
		return nil, fmt.Errorf("--memory-load: %w", err)
	}
	rt, err := o.Runtime(ctx)
	if err != nil {
		return nil, err
	}
	return &engine.Engine{Runtime: rt, GPU: GPU(), Policy: policy, GPUPath: path, DirectIO: o.DirectIO, KeepZeroPages: !o.ExcludeZeroPages, CUDASequential: o.CUDASequential, MemoryLoad: load}, nil
}

// locks names the locks of the two folders stasisd owns: its data folder
// and its runsc state folder.
func (o Options) locks() (data, runsc string) {
	return filepath.Join(o.DataDir, "stasisd.lock"), filepath.Join(o.RunscRoot(), "stasis.lock")
}

// LockDaemon takes, for stasisd's whole life, the data folder and the runsc
// state folder: a second stasisd on either is refused, as is one while a
// daemon-less command drives sandboxes there.
func (o Options) LockDaemon() (release func(), err error) {
	dataLock, runscLock := o.locks()
	for _, dir := range []string{o.DataDir, o.RunscRoot()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	d, err := lockfile.Acquire(dataLock, true, lockfile.Holder("stasisd"))
	if err != nil {
		return nil, fmt.Errorf("data folder %s: another stasisd runs on it (%w); stop it first, or give this one its own --data", o.DataDir, err)
	}
	r, err := lockfile.Acquire(runscLock, true, lockfile.Holder("stasisd"))
	if err != nil {
		d.Release()
		return nil, fmt.Errorf("runsc state folder %s is in use (%w); give this stasisd its own --runsc-root, or wait for the stasis command using it", o.RunscRoot(), err)
	}
	return func() { r.Release(); d.Release() }, nil
}

// LockSandboxes takes the runsc state folder for a daemon-less command
// (stasis suspend, resume): several may share it, but not with a stasisd,
// whose actors must be driven through its API.
func (o Options) LockSandboxes() (release func(), err error) {
	_, runscLock := o.locks()
	if err := os.MkdirAll(o.RunscRoot(), 0o700); err != nil {
		return nil, err
	}
	l, err := lockfile.Acquire(runscLock, false, "")
	var held *lockfile.HeldError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("the runsc state folder %s belongs to %s: drive its actors through stasisd (stasis actor ...), or give this command another --runsc-root: %w", o.RunscRoot(), held.Holder, err)
	}
	if err != nil {
		return nil, err
	}
	return func() { l.Release() }, nil
}
