// Package lifecycle drives actors through their lifecycle: run, pause,
// suspend, resume, delete, exec, golden snapshots and the release of kept
// sandboxes, each an operation of the runner (package op), and the
// reconcile that settles what a stopped stasisd left (docs/service.md has
// the state machine).
package lifecycle

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service/internal/console"
	"github.com/stasis-run/stasis/service/internal/fence"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/ports"
	"github.com/stasis-run/stasis/service/internal/runtimes"
	"github.com/stasis-run/stasis/service/internal/staging"
	"github.com/stasis-run/stasis/service/internal/storeconn"
	"github.com/stasis-run/stasis/service/internal/templates"
	"github.com/stasis-run/stasis/transfer"
)

// Config is what the lifecycle runs with.
type Config struct {
	// DataDir holds the snapshots' folders (DATA/snapshots/ID) and the
	// views resumes restore from while they pull (DATA/views).
	DataDir string
	Log     *slog.Logger
	// KeepPaused, when set, keeps paused actors' sandboxes frozen in memory
	// while the node has room; when nil every pause stops its sandbox.
	KeepPaused *KeepPolicy
	// PullWhole pulls a stored snapshot whole before restoring it, rather
	// than restoring it through a view while it pulls (transfer.Stored.Views).
	PullWhole bool
	// Console bounds each actor's console log (console.Limits).
	Console console.Limits
}

// Parts are the parts of stasisd the lifecycle works with.
type Parts struct {
	Journal   *journal.Journal
	Runner    *op.Runner
	Engines   *runtimes.Engines
	Templates *templates.Templates
	Store     *storeconn.Conn
	Staged    *staging.Copies
	Lease     *fence.Lease
	// Networks sets the actors' networks up (nil: this stasisd manages
	// none); Ports publishes their ports.
	Networks Networks
	Ports    *ports.Ports
}

// Actors are the actors of this stasisd. Safe for concurrent use.
type Actors struct {
	cfg       Config
	journal   *journal.Journal
	runner    *op.Runner
	engines   *runtimes.Engines
	templates *templates.Templates
	store     *storeconn.Conn
	staged    *staging.Copies
	lease     *fence.Lease
	networks  Networks
	ports     *ports.Ports
	pulled    *pulledFolders
	// idling holds the actors an idle pause or suspend runs on.
	idling map[string]bool
	// exits waits on the RUNNING actors' processes.
	exits *exitWatch
	// consoles marks and rotates the actors' console logs.
	consoles *console.Keeper
	mu       sync.Mutex
	// pullMemory lends memory to pulls that hold their image in memory.
	pullMemory transfer.PullMemory
	// lostViews are the sandboxes restored through a view (a pull that
	// went on during the resume) that a stopped stasisd left mounted:
	// Reconcile removes them rather than keeping them.
	lostViews map[string]bool
	// execs ends with EndExecs: the commands exec runs end with it.
	execs    context.Context
	endExecs context.CancelCauseFunc
}

// New is the lifecycle of the actors in p.Journal. Call Reconcile before
// anything else.
func New(cfg Config, p Parts) *Actors {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if p.Networks == nil {
		p.Networks = noNetworks{}
	}
	execs, endExecs := context.WithCancelCause(context.Background())
	return &Actors{cfg: cfg, journal: p.Journal, runner: p.Runner, engines: p.Engines, templates: p.Templates,
		store: p.Store, staged: p.Staged, lease: p.Lease, networks: p.Networks, ports: p.Ports, pulled: newPulledFolders(), idling: map[string]bool{}, exits: newExitWatch(), consoles: console.NewKeeper(cfg.Console),
		execs: execs, endExecs: endExecs}
}

// Close stops the writing of pulled copies still going on (they are pulled
// again when needed).
func (s *Actors) Close() { s.pulled.stopAll() }

func (s *Actors) snapshotDir(id string) string { return filepath.Join(s.cfg.DataDir, "snapshots", id) }

// viewsDir is where resumes mount the views they restore from while they
// pull (transfer.Stored.Views).
func (s *Actors) viewsDir() string { return filepath.Join(s.cfg.DataDir, "views") }

// removeDir removes a snapshot folder, stopping first a pull's writing of
// it that goes on after its resume (pulledFolders).
func (s *Actors) removeDir(dir string) error {
	if dir == "" {
		return nil
	}
	s.pulled.stop(dir)
	return os.RemoveAll(dir)
}
