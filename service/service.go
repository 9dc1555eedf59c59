// Package service is stasisd's core: actors made from templates, driven
// through their lifecycle by the engine, with every operation and every
// step recorded in the journal before it starts. An actor is never left in
// a transitional state: a failed operation ends in a stable state with the
// reason, an operation that runs past its deadline is rolled back, and
// after a crash Reconcile finishes or rolls back whatever was interrupted
// (docs/service.md has the state machine). It speaks the API's types
// (package api); package service/server puts it on the wire.
//
// Service is the facade over the parts, each a package of its own under
// service/internal: op (the operation runner), lifecycle (the actors'
// operations and the reconcile), templates, runtimes (the engine of each
// actor's runtime), staging (staged copies), storeconn (the store opened
// in the background) and fence (the fleet lease and its fence).
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/network"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/hostpolicy"
	"github.com/stasis-run/stasis/service/internal/console"
	"github.com/stasis-run/stasis/service/internal/fence"
	"github.com/stasis-run/stasis/service/internal/lifecycle"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/ports"
	"github.com/stasis-run/stasis/service/internal/runtimes"
	"github.com/stasis-run/stasis/service/internal/staging"
	"github.com/stasis-run/stasis/service/internal/storeconn"
	"github.com/stasis-run/stasis/service/internal/templates"
	"github.com/stasis-run/stasis/store"
)

// Config is what a Service runs on.
type Config struct {
	// DataDir holds the journal, actor folders and local snapshots. It and
	// everything in it is made readable by its owner only.
	DataDir string
	// Engine runs gVisor actors; MicroVM, when set, micro-VM actors
	// (api.RuntimeMicroVM), and MicroVMUnavailable says why it is not, for
	// the refusals of micro-VM templates and actors.
	Engine             *engine.Engine
	MicroVM            *engine.Engine
	MicroVMUnavailable string
	// Repo is the durable snapshot store, open; commits and golden
	// snapshots go there. Or OpenStore opens it, at StoreLocation, when it
	// can (OpenStore, KeepOpeningStore): stasisd serves while it cannot.
	// Neither: no store (--no-store).
	Repo          *store.Repository
	OpenStore     func(context.Context) (*store.Repository, error)
	StoreLocation string
	// Helper is the host path of stasis-cuda, mounted into GPU actors.
	Helper string
	Log    *slog.Logger
	// FenceFile, when set, is where the fleet lease's lapse and the fence
	// commands are handed over to the fence watchdog (fencefile), which
	// freezes the fleet actors when the lease lapses even with stasisd
	// and the agent both gone; Watchdog starts it when it is not running,
	// at each renewal.
	FenceFile string
	Watchdog  func() error
	// Failpoint, "OP/STEP" or "OP/STEP:after", makes the process kill
	// itself with SIGKILL there: the fault tests' way to crash stasisd at
	// every step.
	Failpoint string
	// Node reads this node's fingerprint (NodeInfo, golden compatibility).
	Node func(context.Context) (fingerprint.Fingerprint, error)
	// Deadlines override the operation kinds' deadlines, by kind name
	// (KindNames, ParseDeadlines).
	Deadlines map[string]time.Duration
	// CleanupTimeout bounds the checks and rollbacks after an operation
	// failed or ran out of time; 2 minutes when zero.
	CleanupTimeout time.Duration
	// HostPaths is what host paths templates may give their sandboxes.
	HostPaths hostpolicy.Policy
	// JournalReserve is the disk space kept for the journal's writes that
	// end operations; journal.DefaultReserve when zero, none when negative.
	JournalReserve int64
	// KeepPaused, when set, keeps paused actors' sandboxes frozen in memory
	// while the node has room (KeepPolicy); when nil every pause stops its
	// sandbox.
	KeepPaused *KeepPolicy
	// StageBudget bounds the disk the staged copies of stored snapshots
	// take (Stage); 0 turns staging off.
	StageBudget int64
	// PullWhole pulls a stored snapshot whole before restoring it, rather
	// than restoring it through a view while it pulls (transfer.Stored.Views).
	PullWhole bool
	// Network sets the actors' networks up (docs/service.md,
	// "Networking"); nil: stasisd manages none, each sandbox gets what its
	// bundle says and no port is published. MaxHeldConnections bounds the
	// connections an actor's published ports hold while it wakes
	// (ports.DefaultMaxHeld when zero).
	Network            *network.Manager
	MaxHeldConnections int
	// Console bounds each actor's console log: its size before it is
	// rotated and how many files it keeps (DefaultConsoleLimits when zero).
	Console ConsoleLimits
}

// ConsoleLimits bound an actor's console log (Config.Console).
type ConsoleLimits = console.Limits

// DefaultConsoleMaxSize and DefaultConsoleFiles are ConsoleLimits' defaults.
const (
	DefaultConsoleMaxSize = console.DefaultMaxSize
	DefaultConsoleFiles   = console.DefaultFiles
)

// DefaultConsoleLook is how often KeepConsoles looks at the consoles.
const DefaultConsoleLook = console.DefaultLook

// KeepPolicy is when a pause keeps its sandbox frozen in memory
// (Config.KeepPaused).
type KeepPolicy = lifecycle.KeepPolicy

// DefaultKeepCheck is how often KeepReleasing looks at the node's memory.
const DefaultKeepCheck = lifecycle.DefaultKeepCheck

// Service runs actors. It is safe for concurrent use.
type Service struct {
	cfg       Config
	journal   *journal.Journal
	metrics   *Metrics
	runner    *op.Runner
	engines   *runtimes.Engines
	templates *templates.Templates
	store     *storeconn.Conn
	lease     *fence.Lease
	ports     *ports.Ports
	actors    *lifecycle.Actors
}

// New opens the journal under cfg.DataDir, making the folders it uses
// private. Call Reconcile before serving.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.HostPaths.Check(); err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "actors"), filepath.Join(cfg.DataDir, "snapshots"), filepath.Join(cfg.DataDir, "views")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("data folder: %w", err)
		}
		// Actor state, process memory and secrets live here: owner only,
		// whatever the folder was made with.
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("data folder: %w", err)
		}
	}
	j, err := journal.Open(ctx, filepath.Join(cfg.DataDir, "journal.db"), journal.Options{Reserve: cfg.JournalReserve})
	if err != nil {
		return nil, err
	}
	if !j.Reserved() && cfg.JournalReserve >= 0 {
		cfg.Log.Warn("the journal's disk reserve could not be made (the disk is nearly full); an operation that ends on a full disk may not be recorded until there is room", "data", cfg.DataDir)
	}
	staged, err := staging.New(cfg.DataDir, cfg.StageBudget)
	if err != nil {
		j.Close()
		return nil, err
	}
	s := &Service{cfg: cfg, journal: j, store: storeconn.New(cfg.StoreLocation, cfg.Repo, cfg.OpenStore)}
	// The lease is read at each scrape; s.lease is made below.
	s.metrics = newMetrics(j, s.store.Status, func() api.Lease { return s.lease.Status() })
	s.runner = op.NewRunner(ctx, op.Config{Journal: j, Log: cfg.Log, Deadlines: cfg.Deadlines, CleanupTimeout: cfg.CleanupTimeout, Failpoint: cfg.Failpoint, Observe: s.metrics.observe,
		// An actor an operation left RUNNING is waited on from then.
		Ended: func(a journal.Actor) { s.actors.Ended(a) }})
	s.engines = runtimes.New(cfg.Engine, cfg.MicroVM, cfg.MicroVMUnavailable)
	s.templates = templates.New(templates.Config{DataDir: cfg.DataDir, Helper: cfg.Helper, HostPaths: cfg.HostPaths, Log: cfg.Log}, j, s.engines)
	if s.lease, err = fence.New(ctx, fence.Config{File: cfg.FenceFile, Watchdog: cfg.Watchdog, Log: cfg.Log}, j, s.runner, s.engines); err != nil {
		s.runner.Close()
		j.Close()
		return nil, err
	}
	// The ports ask the actors where they stand and wake them; the actors
	// publish and give up their ports.
	s.ports = ports.New(ports.Config{Log: cfg.Log, MaxHeld: cfg.MaxHeldConnections, Changed: s.runner.Feed().Next,
		Target: func(ctx context.Context, id string) ports.Target { return s.actors.Target(ctx, id) },
		Wake:   func(ctx context.Context, id string) error { return s.actors.Wake(ctx, id) },
		Note:   func(id, msg string) { s.runner.Event(id, "", "wake", msg, 0, nil) }})
	parts := lifecycle.Parts{Journal: j, Runner: s.runner, Engines: s.engines, Templates: s.templates, Store: s.store, Staged: staged, Lease: s.lease, Ports: s.ports}
	if cfg.Network != nil {
		parts.Networks = cfg.Network
	}
	s.actors = lifecycle.New(lifecycle.Config{DataDir: cfg.DataDir, Log: cfg.Log, KeepPaused: cfg.KeepPaused, PullWhole: cfg.PullWhole, Console: cfg.Console}, parts)
	return s, nil
}

// Close stops publishing ports and the writing of pulled copies still
// going on (they are pulled again when needed), and closes the journal.
func (s *Service) Close() error {
	s.ports.Close()
	s.runner.Close()
	s.actors.Close()
	return s.journal.Close()
}

// Journal is the service's journal, for inspection.
func (s *Service) Journal() *journal.Journal { return s.journal }

// Metrics is the service's Prometheus collectors.
func (s *Service) Metrics() *Metrics { return s.metrics }

// NodeInfo is this node's fingerprint, for placement across nodes.
func (s *Service) NodeInfo(ctx context.Context) (fingerprint.Fingerprint, error) {
	if s.cfg.Node == nil {
		return fingerprint.Fingerprint{}, errors.New("this stasisd was started without a fingerprint reader")
	}
	f, err := s.cfg.Node(ctx)
	if err != nil {
		return f, err
	}
	var rt runtime.Runtime
	microVM, absence := s.engines.MicroVM()
	if microVM != nil {
		rt = microVM.Runtime
	}
	f.Runtimes = append(f.Runtimes, fingerprint.Offer(api.RuntimeMicroVM, rt, absence))
	return f, nil
}

// NodeStatus says where the node's store and fleet lease stand.
func (s *Service) NodeStatus(ctx context.Context, _ api.Empty) (api.NodeStatus, error) {
	l, err := s.lease.Get(ctx)
	return api.NodeStatus{Store: s.store.Status(), Lease: l}, err
}
