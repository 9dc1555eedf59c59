// Package engine suspends and resumes actors: sandboxes whose processes may
// hold live CUDA contexts. Suspend moves the GPU state into host memory with
// the stasis-cuda helper inside the sandbox, checkpoints the sandbox into a
// snapshot folder, commits the snapshot and stops the sandbox; resume
// verifies the snapshot, restores a new sandbox and brings the GPU state
// back. A runtime whose sandboxes hold devices (a micro-VM's passed-through
// GPU, runtime.DeviceHolder) has them detached before the checkpoint and
// attached after the restore, and one with its own GPU agent
// (runtime.GPUAgent) moves the GPU state in place of the helper. Any failure
// leaves the actor as it was: running after a failed suspend, suspended
// (snapshot untouched) after a failed resume.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Actor is one sandbox the engine manages.
type Actor struct {
	// ID is the runtime's container id.
	ID string
	// Bundle is the OCI bundle the sandbox is created from.
	Bundle string
	// GPU actors get the CUDA step: the helper at bundle.HelperPath (or
	// the runtime's GPU agent) suspends and resumes every CUDA process in
	// the sandbox.
	GPU bool
	// DurableDirs are folders inside the sandbox, each a bind mount of a
	// host folder, that a Data snapshot keeps.
	DurableDirs []string
	// ConsoleLog receives the sandbox's output.
	ConsoleLog string
}

// Event is one step of an operation, reported as it ends.
type Event struct {
	Actor    string        `json:"actor"`
	Op       string        `json:"op"`
	Step     string        `json:"step"`
	Duration time.Duration `json:"durationNs"`
	Message  string        `json:"message,omitempty"`
	Err      string        `json:"error,omitempty"`
}

// Engine runs suspends and resumes on one runtime.
type Engine struct {
	Runtime runtime.Runtime
	// Helper is the helper's path inside sandboxes; bundle.HelperPath when
	// empty.
	Helper string
	// LockTimeout bounds how long the GPU suspend waits for running GPU
	// work; 30 s when zero.
	LockTimeout time.Duration
	// Events hears of every step as it ends; nil discards them.
	Events func(Event)
	// BeforeStep hears of every step before it starts, so that a journal
	// can record where an operation stands before it gets there.
	BeforeStep func(Event)
	// GPU reads this node's GPUs and the device memory each process holds:
	// a suspend records them and sizes the GPU state by them, a resume
	// checks them. Nil (or a node without NVML) leaves GPU facts out, and
	// the GPU steps to the helper alone.
	GPU gpu.Source
	// Policy is the compatibility policy resumes are checked with.
	Policy compat.Policy
	// FreeDisk reports the free bytes of the filesystem holding a folder;
	// nil uses statfs.
	FreeDisk func(path string) (uint64, error)
	// EagerRestore loads all memory before a restored sandbox runs, instead
	// of letting it load in the background.
	EagerRestore bool
	// CleanupTimeout bounds the rollback steps that run after the caller's
	// context is done; 2 minutes when zero.
	CleanupTimeout time.Duration
}

// SuspendOptions tune Suspend.
type SuspendOptions struct {
	// Dir receives the snapshot. It must be empty or absent.
	Dir   string
	Scope snapshot.Scope
}

// Probe says when a resumed actor is ready: a command that exits 0 inside
// the sandbox, or an HTTP URL that answers 2xx, within Timeout.
type Probe struct {
	Command []string
	URL     string
	Timeout time.Duration
}

// Verification is how much of a snapshot Resume reads before restoring it.
type Verification int

const (
	// VerifyBlocks reads every file and checks every block's SHA-256.
	VerifyBlocks Verification = iota
	// VerifySizes checks the manifest, the file list and the sizes only
	// (snapshot.Check): for snapshots whose bytes were checked when they
	// arrived, where reading them again only delays the restore.
	VerifySizes
)

// ResumeOptions tune Resume.
type ResumeOptions struct {
	// Verify is VerifyBlocks unless set.
	Verify Verification
	// ID is the new sandbox's container id; the actor's own when empty.
	ID string
	// DeviceMap restores GPU state onto other GPUs; when empty, the map the
	// compatibility check chose is used.
	DeviceMap gpu.DeviceMap
	Probe     Probe
}

func (e *Engine) helperPath() string {
	if e.Helper != "" {
		return e.Helper
	}
	return bundle.HelperPath
}

func (e *Engine) lockTimeout() time.Duration {
	if e.LockTimeout > 0 {
		return e.LockTimeout
	}
	return 30 * time.Second
}

// cleanupContext outlives the caller's context, so that a cancelled suspend
// still resumes the GPU state it froze.
func (e *Engine) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := e.CleanupTimeout
	if d <= 0 {
		d = 2 * time.Minute
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// op runs an operation's steps and reports each.
type op struct {
	e     *Engine
	actor string
	name  string
}

func (o op) step(name string, fn func() (string, error)) error {
	if o.e.BeforeStep != nil {
		o.e.BeforeStep(Event{Actor: o.actor, Op: o.name, Step: name})
	}
	start := time.Now()
	msg, err := fn()
	ev := Event{Actor: o.actor, Op: o.name, Step: name, Duration: time.Since(start), Message: msg}
	if err != nil {
		ev.Err = err.Error()
		err = fmt.Errorf("%s %s: %s: %w", o.name, o.actor, name, err)
	}
	o.notify(ev)
	return err
}

func (o op) notify(ev Event) {
	if o.e.Events != nil {
		o.e.Events(ev)
	}
}

func (o op) note(msg string) {
	o.notify(Event{Actor: o.actor, Op: o.name, Step: "note", Message: msg})
}

// ErrRefused marks a request refused before anything was touched.
var ErrRefused = errors.New("refused")
