// Package service is stasisd's core: actors made from templates, driven
// through their lifecycle by the engine, with every operation and every
// step recorded in the journal before it starts. An actor is never left in
// a transitional state: a failed operation ends in a stable state with the
// reason, and after a crash Reconcile finishes or rolls back whatever was
// interrupted (docs/service.md has the state machine).
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

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// State is where an actor stands.
type State string

// The actor states. Those ending in -ING are transitional: an operation is
// running, and only Reconcile after a crash ever sees one without it.
const (
	Creating   State = "CREATING"
	Running    State = "RUNNING"
	Pausing    State = "PAUSING"
	Paused     State = "PAUSED"
	Suspending State = "SUSPENDING"
	Suspended  State = "SUSPENDED"
	Resuming   State = "RESUMING"
	Deleting   State = "DELETING"
	Crashed    State = "CRASHED"
)

// Transitional tells whether an operation is in flight in state s.
func (s State) Transitional() bool {
	switch s {
	case Creating, Pausing, Suspending, Resuming, Deleting:
		return true
	}
	return false
}

// Config is what a Service runs on.
type Config struct {
	// DataDir holds the journal, actor folders and local snapshots.
	DataDir string
	Engine  *engine.Engine
	// Repo is the durable snapshot store; commits and golden snapshots go
	// there.
	Repo *store.Repository
	// Helper is the host path of stasis-cuda, mounted into GPU actors.
	Helper string
	Log    *slog.Logger
	// Failpoint, "OP/STEP" or "OP/STEP:after", makes the process kill
	// itself with SIGKILL there: the fault tests' way to crash stasisd at
	// every step.
	Failpoint string
	// Node reads this node's fingerprint (NodeInfo, golden compatibility).
	Node func(context.Context) (node.Fingerprint, error)
}

// Service runs actors. It is safe for concurrent use.
type Service struct {
	cfg     Config
	rt      runtime.Runtime
	journal *journal.Journal
	metrics *Metrics

	mu sync.Mutex
	// current maps a sandbox id to the operation running on it, so that
	// engine steps are journaled against the right operation.
	current map[string]*operation
	// done is closed when the operation with that id ends in this process;
	// a retried request waits on it.
	done map[string]chan struct{}
}

// New opens the journal under cfg.DataDir. Call Reconcile before serving.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{cfg.DataDir, filepath.Join(cfg.DataDir, "actors"), filepath.Join(cfg.DataDir, "snapshots")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("data folder: %w", err)
		}
	}
	j, err := journal.Open(ctx, filepath.Join(cfg.DataDir, "journal.db"))
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, rt: cfg.Engine.Runtime, journal: j, current: map[string]*operation{}, done: map[string]chan struct{}{}}
	s.metrics = newMetrics(s)
	eng := *cfg.Engine
	eng.BeforeStep = func(ev engine.Event) { s.engineStep(ev, false) }
	events := cfg.Engine.Events
	eng.Events = func(ev engine.Event) {
		s.engineStep(ev, true)
		if events != nil {
			events(ev)
		}
	}
	s.cfg.Engine = &eng
	return s, nil
}

// Close closes the journal.
func (s *Service) Close() error { return s.journal.Close() }

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
var ErrInvalid = errors.New("invalid request")

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func (s *Service) actorDir(id string) string { return filepath.Join(s.cfg.DataDir, "actors", id) }

func (s *Service) snapshotDir(id string) string { return filepath.Join(s.cfg.DataDir, "snapshots", id) }

// event appends a line to an actor's history and logs it.
func (s *Service) event(ctx context.Context, actor, opID, step, msg string, d time.Duration, err error) {
	e := journal.Event{Actor: actor, Operation: opID, Step: step, Message: msg, Duration: d}
	attrs := []any{"actor", actor, "operation", opID, "duration", d.String(), "message", msg}
	level := slog.LevelInfo
	if err != nil {
		e.Error = err.Error()
		attrs, level = append(attrs, "error", e.Error), slog.LevelWarn
	}
	if _, jerr := s.journal.AddEvent(context.WithoutCancel(ctx), e); jerr != nil {
		s.cfg.Log.Error("journal event", "actor", actor, "error", jerr)
	}
	s.cfg.Log.Log(ctx, level, step, attrs...)
}

// step journals that an operation is about to run a step, then runs it.
func (s *Service) step(ctx context.Context, o *operation, name string, fn func() (string, error)) error {
	s.beforeStep(ctx, o.actor, o.id, o.kind, name)
	start := time.Now()
	msg, err := fn()
	s.event(ctx, o.actor, o.id, name, msg, time.Since(start), err)
	s.failpoint(o.kind, name, true)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func (s *Service) beforeStep(ctx context.Context, actor, opID, kind, name string) {
	if err := s.journal.Step(context.WithoutCancel(ctx), opID, name); err != nil {
		s.cfg.Log.Error("journal step", "actor", actor, "step", name, "error", err)
	}
	s.failpoint(kind, name, false)
}

// engineStep journals the engine's own steps against the operation that
// runs on that sandbox.
func (s *Service) engineStep(ev engine.Event, ended bool) {
	s.mu.Lock()
	o := s.current[ev.Actor]
	s.mu.Unlock()
	if o == nil {
		return
	}
	if !ended {
		s.beforeStep(context.Background(), o.actor, o.id, o.kind, ev.Step)
		return
	}
	var stepErr error
	if ev.Err != "" {
		stepErr = errors.New(ev.Err)
	}
	s.event(context.Background(), o.actor, o.id, ev.Step, ev.Message, ev.Duration, stepErr)
	s.failpoint(o.kind, ev.Step, true)
}

// failpoint kills this process when the configured failpoint is reached.
func (s *Service) failpoint(kind, step string, after bool) {
	if s.cfg.Failpoint == "" {
		return
	}
	at := kind + "/" + step
	if after {
		at += ":after"
	}
	if at == s.cfg.Failpoint {
		s.cfg.Log.Warn("failpoint reached: killing stasisd", "failpoint", at)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously; never go on
	}
}

// manifestOf loads a committed snapshot's manifest, or nil when the folder
// holds none (an uncommitted or removed snapshot).
func manifestOf(dir string) *snapshot.Manifest {
	if dir == "" {
		return nil
	}
	m, err := snapshot.Load(dir)
	if err != nil {
		return nil
	}
	return m
}

// NodeInfo is this node's fingerprint, for placement across nodes.
func (s *Service) NodeInfo(ctx context.Context) (node.Fingerprint, error) {
	if s.cfg.Node == nil {
		return node.Fingerprint{}, errors.New("this stasisd was started without a fingerprint reader")
	}
	return s.cfg.Node(ctx)
}
