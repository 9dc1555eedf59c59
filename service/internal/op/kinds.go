// Package op runs stasisd's operations on actors: each begins, runs its
// steps and ends in the journal (Runner.Run), of one kind that says which
// states it starts from and how a crash during it is settled (Kind).
package op

import (
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// Kind is one kind of operation: which states it starts from, the state
// the actor is in while it runs, where it leaves the actor when it works,
// what snapshot it takes, how long it may take, and how a daemon that died
// during it settles it. Every operation goes through Runner.Run with one
// of these; nothing else moves an actor between states.
type Kind struct {
	Name string
	// From lists the states the operation starts from; empty means any
	// stable state (no operation runs, so the actor is in one).
	From []api.State
	// Creates says the operation makes the actor (run).
	Creates bool
	During  api.State
	// Target is the state of success; "" for delete (the actor is gone).
	Target api.State
	// Snapshot is the kind of snapshot the operation takes, if any.
	Snapshot api.SnapshotKind
	// Deadline is how long the operation may run before it is cut short
	// and rolled back, unless Config.Deadlines says otherwise.
	Deadline time.Duration
	Recovery Recovery
}

// Recovery is how Reconcile settles an operation a crash interrupted.
type Recovery int

const (
	// RecoverStart: keep a sandbox that runs (thawed), else CRASHED.
	RecoverStart Recovery = iota
	// RecoverSnapshot: finish a committed snapshot, roll back the rest.
	RecoverSnapshot
	// RecoverResume: keep a restored sandbox that runs, else roll back.
	RecoverResume
	// RecoverDelete: finish the delete.
	RecoverDelete
	// RecoverRelease: finish stopping a paused actor's kept sandbox.
	RecoverRelease
	// RecoverFence: FENCED when the sandbox is frozen, RUNNING when it
	// runs (the fence loop acts again), CRASHED when it is gone.
	RecoverFence
	// RecoverRestart: keep a booted sandbox that runs, else back to how
	// the process ended (the restart policy tries again).
	RecoverRestart
)

// The kinds of operation on an actor, as the journal records them and
// failpoints name them (Failpoint).
const (
	KindRun     = "run"
	KindPause   = "pause"
	KindSuspend = "suspend"
	KindResume  = "resume"
	KindDelete  = "delete"
	KindGolden  = "golden"
	KindRelease = "release"
	KindFence   = "fence"
	KindUnfence = "unfence"
	KindExit    = "exit"
	KindRestart = "restart"
)

// The service's own steps, beside the engine's (engine.Step...) and the
// transfer's (transfer.StepPush, StepPull).
const (
	// StepBundle writes the actor's bundle from its template.
	StepBundle = "bundle"
	// StepRemoveFiles removes a deleted actor's folder and snapshots.
	StepRemoveFiles = "remove-files"
	// StepNetwork sets the actor's network up (package network).
	StepNetwork = "network"
	// StepRenameSandbox moves a sandbox an older stasisd named to the
	// actor's sandbox id (api.SandboxID).
	StepRenameSandbox = "rename-sandbox"
)

// Failpoint names the point before (or, after, just after) step of
// operations of kind: STASIS_FAILPOINT set to it makes stasisd kill itself
// there (Config.Failpoint), for the crash tests.
func Failpoint(kind, step string, after bool) string {
	at := kind + "/" + step
	if after {
		at += ":after"
	}
	return at
}

// The kinds, one value each: operations and the journal name them.
var (
	Run = &Kind{Name: KindRun, Creates: true, During: api.Creating, Target: api.Running,
		Deadline: 30 * time.Minute, Recovery: RecoverStart}
	Pause = &Kind{Name: KindPause, From: []api.State{api.Running}, During: api.Pausing, Target: api.Paused,
		Snapshot: api.KindPause, Deadline: 30 * time.Minute, Recovery: RecoverSnapshot}
	Suspend = &Kind{Name: KindSuspend, From: []api.State{api.Running, api.Paused, api.Suspended}, During: api.Suspending, Target: api.Suspended,
		Snapshot: api.KindCommit, Deadline: time.Hour, Recovery: RecoverSnapshot}
	Resume = &Kind{Name: KindResume, From: []api.State{api.Paused, api.Suspended, api.Crashed, api.Exited}, During: api.Resuming, Target: api.Running,
		Deadline: time.Hour, Recovery: RecoverResume}
	Delete = &Kind{Name: KindDelete, During: api.Deleting,
		Deadline: 10 * time.Minute, Recovery: RecoverDelete}
	Golden = &Kind{Name: KindGolden, From: []api.State{api.Running}, During: api.Suspending, Target: api.Suspended,
		Snapshot: api.KindGolden, Deadline: time.Hour, Recovery: RecoverSnapshot}
	// Release stops the sandbox a pause kept in memory (KeepPolicy); the
	// actor stays PAUSED throughout.
	Release = &Kind{Name: KindRelease, From: []api.State{api.Paused}, During: api.Paused, Target: api.Paused,
		Deadline: 10 * time.Minute, Recovery: RecoverRelease}
	// Fence freezes a running actor whose node's fleet lease lapsed;
	// Unfence thaws it (package fence).
	Fence = &Kind{Name: KindFence, From: []api.State{api.Running}, During: api.Fenced, Target: api.Fenced,
		Deadline: time.Minute, Recovery: RecoverFence}
	Unfence = &Kind{Name: KindUnfence, From: []api.State{api.Fenced}, During: api.Resuming, Target: api.Running,
		Deadline: time.Minute, Recovery: RecoverFence}
	// Exit records that a running actor's process ended on its own
	// (EXITED, or CRASHED by a signal); the actor reads RUNNING while it
	// looks.
	Exit = &Kind{Name: KindExit, From: []api.State{api.Running}, During: api.Running, Target: api.Exited,
		Deadline: time.Minute, Recovery: RecoverStart}
	// Restart boots an actor whose process ended on its own again, as its
	// template's restart policy asks.
	Restart = &Kind{Name: KindRestart, From: []api.State{api.Exited, api.Crashed}, During: api.Resuming, Target: api.Running,
		Deadline: 30 * time.Minute, Recovery: RecoverRestart}
)

// kinds lists every kind, by name, for the journal's records and the
// deadline configuration.
var kinds = []*Kind{Run, Pause, Suspend, Resume, Delete, Golden, Release, Fence, Unfence, Exit, Restart}

// Named is the kind of that name, nil when there is none.
func Named(name string) *Kind {
	for _, k := range kinds {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// KindNames lists the operation kinds, for flags that configure them.
func KindNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return names
}

// ParseDeadlines reads KIND=DURATION pairs (such as suspend=20m) into the
// map Config.Deadlines takes.
func ParseDeadlines(pairs []string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || Named(name) == nil {
			return nil, fmt.Errorf("%w: deadline %q: want KIND=DURATION with KIND one of %s", errdefs.ErrInvalidArgument, p, strings.Join(KindNames(), ", "))
		}
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: deadline %q: want a positive duration such as 20m", errdefs.ErrInvalidArgument, p)
		}
		out[name] = d
	}
	return out, nil
}

// fromStrings are the states it starts from, as the journal writes them.
func (k *Kind) fromStrings() []string {
	out := make([]string, len(k.From))
	for i, s := range k.From {
		out[i] = string(s)
	}
	return out
}
