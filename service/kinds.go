package service

import (
	"time"

	"github.com/stasis-run/stasis/service/internal/lifecycle"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/ports"
)

// The kinds of operation on an actor, as the journal records them and
// failpoints name them (Failpoint).
const (
	KindRun     = op.KindRun
	KindPause   = op.KindPause
	KindSuspend = op.KindSuspend
	KindResume  = op.KindResume
	KindDelete  = op.KindDelete
	KindGolden  = op.KindGolden
	KindRelease = op.KindRelease
	KindFence   = op.KindFence
	KindUnfence = op.KindUnfence
)

// The service's own steps, beside the engine's and the transfer's.
const (
	StepBundle        = op.StepBundle
	StepRemoveFiles   = op.StepRemoveFiles
	StepRenameSandbox = op.StepRenameSandbox
)

// Failpoint names the point before (or, after, just after) step of
// operations of kind: STASIS_FAILPOINT set to it makes stasisd kill itself
// there (Config.Failpoint), for the crash tests.
func Failpoint(kind, step string, after bool) string { return op.Failpoint(kind, step, after) }

// KindNames lists the operation kinds, for flags that configure them.
func KindNames() []string { return op.KindNames() }

// ParseDeadlines reads KIND=DURATION pairs (such as suspend=20m) into the
// map Config.Deadlines takes.
func ParseDeadlines(pairs []string) (map[string]time.Duration, error) {
	return op.ParseDeadlines(pairs)
}

// DefaultIdleCheck is how often KeepIdling looks for idle actors.
const DefaultIdleCheck = lifecycle.DefaultIdleCheck

// DefaultExitCheck is how often KeepWatchingExits looks for actors that
// began to run.
const DefaultExitCheck = lifecycle.DefaultExitCheck

// DefaultMaxHeldConnections is how many connections an actor's published
// ports hold at most while it wakes, unless Config says otherwise.
const DefaultMaxHeldConnections = ports.DefaultMaxHeld
