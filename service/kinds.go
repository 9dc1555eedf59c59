package service

import (
	"fmt"
	"strings"
	"time"

	"github.com/stasis-run/stasis/api"
)

// opKind is one kind of operation: which states it starts from, the state
// the actor is in while it runs, where it leaves the actor when it works,
// what snapshot it takes, how long it may take, and how a daemon that died
// during it settles it. Every operation goes through Service.run with one
// of these; nothing else moves an actor between states.
type opKind struct {
	name string
	// from lists the states the operation starts from; empty means any
	// stable state (no operation runs, so the actor is in one).
	from []api.State
	// creates says the operation makes the actor (run).
	creates bool
	during  api.State
	// target is the state of success; "" for delete (the actor is gone).
	target api.State
	// snapshot is the kind of snapshot the operation takes, if any.
	snapshot api.SnapshotKind
	// deadline is how long the operation may run before it is cut short
	// and rolled back, unless Config.Deadlines says otherwise.
	deadline time.Duration
	recovery recovery
}

// recovery is how Reconcile settles an operation a crash interrupted.
type recovery int

const (
	// recoverStart: keep a sandbox that runs (thawed), else CRASHED.
	recoverStart recovery = iota
	// recoverSnapshot: finish a committed snapshot, roll back the rest.
	recoverSnapshot
	// recoverResume: keep a restored sandbox that runs, else roll back.
	recoverResume
	// recoverDelete: finish the delete.
	recoverDelete
	// recoverRelease: finish stopping a paused actor's kept sandbox.
	recoverRelease
	// recoverFence: FENCED when the sandbox is frozen, RUNNING when it
	// runs (the fence loop acts again), CRASHED when it is gone.
	recoverFence
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
)

// The service's own steps, beside the engine's (engine.Step...) and the
// transfer's (transfer.StepPush, StepPull).
const (
	// StepBundle writes the actor's bundle from its template.
	StepBundle = "bundle"
	// StepRemoveFiles removes a deleted actor's folder and snapshots.
	StepRemoveFiles = "remove-files"
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

var (
	opRun = &opKind{name: KindRun, creates: true, during: api.Creating, target: api.Running,
		deadline: 30 * time.Minute, recovery: recoverStart}
	opPause = &opKind{name: KindPause, from: []api.State{api.Running}, during: api.Pausing, target: api.Paused,
		snapshot: api.KindPause, deadline: 30 * time.Minute, recovery: recoverSnapshot}
	opSuspend = &opKind{name: KindSuspend, from: []api.State{api.Running, api.Paused, api.Suspended}, during: api.Suspending, target: api.Suspended,
		snapshot: api.KindCommit, deadline: time.Hour, recovery: recoverSnapshot}
	opResume = &opKind{name: KindResume, from: []api.State{api.Paused, api.Suspended, api.Crashed}, during: api.Resuming, target: api.Running,
		deadline: time.Hour, recovery: recoverResume}
	opDelete = &opKind{name: KindDelete, during: api.Deleting,
		deadline: 10 * time.Minute, recovery: recoverDelete}
	opGolden = &opKind{name: KindGolden, from: []api.State{api.Running}, during: api.Suspending, target: api.Suspended,
		snapshot: api.KindGolden, deadline: time.Hour, recovery: recoverSnapshot}
	// opRelease stops the sandbox a pause kept in memory (KeepPolicy); the
	// actor stays PAUSED throughout.
	opRelease = &opKind{name: KindRelease, from: []api.State{api.Paused}, during: api.Paused, target: api.Paused,
		deadline: 10 * time.Minute, recovery: recoverRelease}
	// opFence freezes a running actor whose node's fleet lease lapsed;
	// opUnfence thaws it (fence.go).
	opFence = &opKind{name: KindFence, from: []api.State{api.Running}, during: api.Fenced, target: api.Fenced,
		deadline: time.Minute, recovery: recoverFence}
	opUnfence = &opKind{name: KindUnfence, from: []api.State{api.Fenced}, during: api.Resuming, target: api.Running,
		deadline: time.Minute, recovery: recoverFence}
)

// opKinds lists every kind, by name, for the journal's records and the
// deadline configuration.
var opKinds = []*opKind{opRun, opPause, opSuspend, opResume, opDelete, opGolden, opRelease, opFence, opUnfence}

func kindNamed(name string) *opKind {
	for _, k := range opKinds {
		if k.name == name {
			return k
		}
	}
	return nil
}

// KindNames lists the operation kinds, for flags that configure them.
func KindNames() []string {
	names := make([]string, len(opKinds))
	for i, k := range opKinds {
		names[i] = k.name
	}
	return names
}

// ParseDeadlines reads KIND=DURATION pairs (such as suspend=20m) into the
// map Config.Deadlines takes.
func ParseDeadlines(pairs []string) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for _, p := range pairs {
		name, value, ok := strings.Cut(p, "=")
		if !ok || kindNamed(name) == nil {
			return nil, fmt.Errorf("%w: deadline %q: want KIND=DURATION with KIND one of %s", ErrInvalid, p, strings.Join(KindNames(), ", "))
		}
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: deadline %q: want a positive duration such as 20m", ErrInvalid, p)
		}
		out[name] = d
	}
	return out, nil
}

func (k *opKind) fromStrings() []string {
	out := make([]string, len(k.from))
	for i, s := range k.from {
		out[i] = string(s)
	}
	return out
}
