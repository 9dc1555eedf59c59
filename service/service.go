// Package service is stasisd's core: actors made from templates, driven
// through their lifecycle by the engine, with every operation and every
// step recorded in the journal before it starts. An actor is never left in
// a transitional state: a failed operation ends in a stable state with the
// reason, an operation that runs past its deadline is rolled back, and
// after a crash Reconcile finishes or rolls back whatever was interrupted
// (docs/service.md has the state machine). It speaks the API's types
// (package api); package api/server puts it on the wire.
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/tick"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/transfer"
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
	HostPaths HostPolicy
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
}

func (c Config) cleanupTimeout() time.Duration {
	if c.CleanupTimeout > 0 {
		return c.CleanupTimeout
	}
	return 2 * time.Minute
}

// Service runs actors. It is safe for concurrent use.
type Service struct {
	cfg     Config
	eng     *engine.Engine
	microVM *engine.Engine
	journal *journal.Journal
	metrics *Metrics
	lease   *fleetLease
	store   *storeConn
	events  *eventFeed
	stager  *stager
	pulled  *pulledFolders
	// unsettled holds the ends of operations the journal could not
	// record yet; stopSettling ends their writing.
	unsettled    *unsettledEnds
	stopSettling func()
	// pullMemory lends memory to pulls that hold their image in memory.
	pullMemory transfer.PullMemory
	// lostViews are the sandboxes restored through a view (a pull that
	// went on during the resume) that a stopped stasisd left mounted:
	// Reconcile removes them rather than keeping them.
	lostViews map[string]bool

	mu sync.Mutex
	// done is closed when the operation with that id ends in this process;
	// a retried request waits on it.
	done map[string]chan struct{}
}

// New opens the journal under cfg.DataDir, making the folders it uses
// private. Call Reconcile before serving.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.HostPaths.check(); err != nil {
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
	st, err := newStager(cfg.DataDir, cfg.StageBudget)
	if err != nil {
		j.Close()
		return nil, err
	}
	s := &Service{cfg: cfg, eng: cfg.Engine, microVM: newMicroVMEngine(cfg), journal: j, done: map[string]chan struct{}{}, lease: newFleetLease(), store: newStoreConn(cfg), events: newEventFeed(), stager: st, pulled: newPulledFolders()}
	if err := s.lease.load(ctx, j); err != nil {
		j.Close()
		return nil, err
	}
	s.metrics = newMetrics(s)
	s.unsettled = newUnsettledEnds()
	background := context.WithoutCancel(ctx)
	s.stopSettling = tick.Every(background, settleEvery, func() { s.writeUnsettled(background) })
	return s, nil
}

// Close stops the writing of pulled copies still going on (they are pulled
// again when needed) and closes the journal.
func (s *Service) Close() error {
	s.stopSettling()
	s.pulled.stopAll()
	return s.journal.Close()
}

// Journal is the service's journal, for inspection.
func (s *Service) Journal() *journal.Journal { return s.journal }

// Metrics is the service's Prometheus collectors.
func (s *Service) Metrics() *Metrics { return s.metrics }

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

func checkName(what, name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w: %s name %q: use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, what, name)
	}
	return nil
}

// ErrInvalid marks a request that is malformed.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid request")

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func (s *Service) actorDir(id string) string { return filepath.Join(s.cfg.DataDir, "actors", id) }

func (s *Service) snapshotDir(id string) string { return filepath.Join(s.cfg.DataDir, "snapshots", id) }

// viewsDir is where resumes mount the views they restore from while they
// pull (transfer.Stored.Views).
func (s *Service) viewsDir() string { return filepath.Join(s.cfg.DataDir, "views") }

// event appends a line to an actor's history and logs it.
func (s *Service) event(actor, opID, step, msg string, d time.Duration, err error) {
	e := journal.Event{Actor: actor, Operation: opID, Step: step, Message: msg, Duration: d}
	attrs := []any{"actor", actor, "operation", opID, "duration", d.String(), "message", msg}
	level := slog.LevelInfo
	if err != nil {
		e.Error = err.Error()
		attrs, level = append(attrs, "error", e.Error), slog.LevelWarn
	}
	if _, jerr := s.journal.AddEvent(context.Background(), e); jerr != nil {
		s.cfg.Log.Error("journal event", "actor", actor, "error", jerr)
	} else {
		s.events.notify()
	}
	s.cfg.Log.Log(context.Background(), level, step, attrs...)
}

// noteObserver records the engine's steps in an actor's history outside
// any operation (the reconciler's removal of a leftover sandbox).
func (s *Service) noteObserver(actor string) engine.Observer {
	return engine.Observer{After: func(st engine.Step) {
		var err error
		if st.Err != "" {
			err = errors.New(st.Err)
		}
		s.event(actor, "", st.Name, st.Message, st.Duration, err)
	}}
}

// failpoint kills this process when the configured failpoint is reached.
func (s *Service) failpoint(kind, step string, after bool) {
	if s.cfg.Failpoint == "" {
		return
	}
	if at := Failpoint(kind, step, after); at == s.cfg.Failpoint {
		s.cfg.Log.Warn("failpoint reached: killing stasisd", "failpoint", at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never go on
	}
}

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
	if s.cfg.MicroVM != nil {
		rt = s.cfg.MicroVM.Runtime
	}
	f.Runtimes = append(f.Runtimes, fingerprint.Offer(api.RuntimeMicroVM, rt, s.cfg.microVMAbsence()))
	return f, nil
}
