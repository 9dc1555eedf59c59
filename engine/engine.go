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
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/snapshot"
)

// Actor is one sandbox the engine manages.
type Actor struct {
	// ID is the runtime's container id.
	ID string
	// Name is what messages and manifests call the actor (stasisd's actor
	// id, which differs from its container's); ID when empty.
	Name string
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

// Step is one step of an operation: reported to an Observer's Before as it
// starts (no duration, message or error yet) and to its After as it ends.
type Step struct {
	Actor    string        `json:"actor"`
	Op       string        `json:"op"`
	Name     string        `json:"step"`
	Duration time.Duration `json:"durationNs"`
	Message  string        `json:"message,omitempty"`
	Err      string        `json:"error,omitempty"`
}

// Observer hears of the steps of one call: Before as each starts, so that a
// journal can record where an operation stands before it gets there, and
// After as each ends. Either may be nil. A step whose Before fails does not
// run, and fails with that error: what cannot be recorded is not done.
// Steps that undo a failed one (the GPU state resumed, a new sandbox
// removed) run whatever Before says, since not running them would leave a
// workload frozen or a sandbox behind.
type Observer struct {
	Before func(Step) error
	After  func(Step)
}

// Engine runs suspends and resumes on one runtime. Its settings are set
// before its first use; it keeps what a resume leaves for the next
// suspend of the same sandbox, so it is not copied once used.
type Engine struct {
	Runtime runtime.Runtime
	// Helper is the helper's path inside sandboxes; bundle.HelperPath when
	// empty.
	Helper string
	// LockTimeout bounds how long the GPU suspend waits for running GPU
	// work; 30 s when zero.
	LockTimeout time.Duration
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
	// MemoryLoad is how a restore loads the image's memory into the
	// sandbox; MemoryLoadAuto when empty.
	MemoryLoad MemoryLoad
	// HugePagesDir is where the host's transparent huge page settings are
	// read for MemoryLoadAuto; node.HugePagesDir when empty.
	HugePagesDir string
	// GPUPath is how a suspend moves GPU state; GPUPathExec when empty.
	GPUPath GPUPath
	// CUDASequential has the runtime's own CUDA step (GPUPathRuntime) act
	// on one process at a time rather than all at once.
	CUDASequential bool
	// DirectIO writes and reads images around the page cache, where the
	// runtime can (runsc --direct).
	DirectIO bool
	// KeepZeroPages writes the committed pages that hold only zeros into
	// images. By default they are left out where the runtime can (runsc
	// --exclude-committed-zero-pages; restored, they read as zeros):
	// measured, that costs nothing on an actor without such pages and makes
	// the image of one with many smaller and both ways faster
	// (docs/benchmarks.md).
	KeepZeroPages bool
	// CleanupTimeout bounds the rollback steps that run after the caller's
	// context is done; 2 minutes when zero.
	CleanupTimeout time.Duration
	// FollowWait is the least time a suspend waits, after the checkpoint,
	// for its follower (SuspendOptions.Follower) to read the rest of the
	// image before it hashes the image itself; 10 s when zero.
	FollowWait time.Duration

	// resumed is what each resume left for the next suspend of its
	// sandbox (firstreads.go).
	resumed resumedSet
}

// MemoryLoad is how a restore loads the image's memory into the sandbox.
type MemoryLoad string

// The ways. Measured on the H200 with an 8 GiB GPU actor whose sandbox
// memory is in huge pages (docs/benchmarks.md, "Huge pages and the memory
// load"), loading all of a page-cached image first reached the first GPU
// operation 0.2-0.8 s sooner than loading in the background (the driver's
// restore reads all of the device memory's copy), while from a cold disk
// the background load was 2.4 s sooner; with 4 KiB pages the two were even
// warm and the background load won cold. A CPU actor's readiness came
// sooner with the background load either way (BenchmarkHugePages).
const (
	// MemoryLoadAuto loads a GPU actor's memory eagerly when at least
	// EagerResidentShare of the image is in the page cache and sandbox
	// memory is in huge pages, and in the background otherwise.
	MemoryLoadAuto MemoryLoad = ""
	// MemoryLoadEager loads all memory before the sandbox runs.
	MemoryLoadEager MemoryLoad = "eager"
	// MemoryLoadBackground lets the sandbox run while its memory loads,
	// each page it touches first loaded on demand.
	MemoryLoadBackground MemoryLoad = "background"
)

// EagerResidentShare is the share of an image that must be in the page
// cache for MemoryLoadAuto to load it eagerly.
const EagerResidentShare = 0.9

// ParseMemoryLoad reads "auto" (or ""), "eager" or "background".
func ParseMemoryLoad(s string) (MemoryLoad, error) {
	switch m := MemoryLoad(s); m {
	case "auto", MemoryLoadAuto:
		return MemoryLoadAuto, nil
	case MemoryLoadEager, MemoryLoadBackground:
		return m, nil
	}
	return "", errdefs.Mark(fmt.Errorf("memory load %q: want auto, eager or background", s), errdefs.ErrInvalidArgument)
}

// GPUPath is how a suspend moves a GPU actor's state into host memory and
// a resume puts it back.
type GPUPath string

// The paths. The default is exec: on the H200, an 8 GiB actor suspended
// about 2 s faster by it than by runsc's own step (which puts the GPU
// state back after the save, for a sandbox that is stopped right after),
// and resumed as fast (docs/benchmarks.md, "The two GPU paths").
const (
	// GPUPathExec runs the helper in the sandbox: stasis-cuda suspend
	// --all before the checkpoint, resume --all after the restore (with the
	// device map). Every runtime can.
	GPUPathExec GPUPath = snapshot.GPUPathExec
	// GPUPathRuntime has the runtime run the helper itself on every CUDA
	// process around the checkpoint (runsc --cuda-checkpoint-path), and
	// again after the restore, with the device map given to the helper
	// through the restore's environment.
	GPUPathRuntime GPUPath = snapshot.GPUPathRuntime
)

// ParseGPUPath reads exec or runtime ("" is exec).
func ParseGPUPath(s string) (GPUPath, error) {
	switch s {
	case "":
		return GPUPathExec, nil
	case string(GPUPathExec), string(GPUPathRuntime):
		return GPUPath(s), nil
	}
	return "", errdefs.Mark(fmt.Errorf("GPU path %q: want exec or runtime", s), errdefs.ErrInvalidArgument)
}

// gpuPath is the path a suspend takes on this runtime.
func (e *Engine) gpuPath() (GPUPath, error) {
	if e.GPUPath != GPUPathRuntime {
		return GPUPathExec, nil
	}
	_, agent := e.Runtime.(runtime.GPUAgent)
	if agent || !e.Runtime.Capabilities().CUDACheckpoint {
		return "", fmt.Errorf("%w: the GPU path %q needs a runtime that checkpoints CUDA processes itself (runsc with --cuda-checkpoint-path), and %s %s does not", ErrRefused, e.GPUPath, e.Runtime.Info().Name, e.Runtime.Info().Version)
	}
	return GPUPathRuntime, nil
}

// SuspendOptions tune Suspend.
type SuspendOptions struct {
	// Name is the caller's operation (a pause, a commit), named in its
	// errors; "suspend" when empty.
	Name string
	// Dir receives the snapshot. It must be empty or absent.
	Dir   string
	Scope snapshot.Scope
	// Keep, when set, is asked once a Full snapshot is committed whether
	// the sandbox stays, frozen (Runtime.Pause), instead of being stopped,
	// and why: a kept sandbox holds the actor's memory with its GPU state
	// released, so that ResumeKept brings it back with nothing to load.
	// The snapshot is committed either way and holds the same state. A
	// sandbox whose GPU state the runtime put back after its checkpoint
	// (GPUPathRuntime) is never kept: frozen, it would hold the GPU.
	Keep     func() (bool, string)
	Observer Observer
	// Follower, when set, reads a Full snapshot's image while the runtime
	// writes it (a push overlapped with the checkpoint), on a runtime that
	// writes its image front to back (runtime.Capabilities.AppendImage).
	Follower ImageFollower
}

// An ImageFollower reads a Full snapshot's image while the runtime writes
// it, as a push that overlaps the checkpoint does (package archiver's
// Follower). Follow starts it on the image folder (image, a slash path
// inside the snapshot folder dir); Written, once the checkpoint is over,
// reads what is left and returns the SHA-256 blocks of every file it read
// (snapshot.File.Blocks, by path in the snapshot), which the commit takes
// instead of reading those files again; Stop ends it, without a result,
// when the checkpoint failed. A follower that fails costs the suspend
// nothing: the commit reads the files itself.
type ImageFollower interface {
	Follow(ctx context.Context, dir, image string) error
	Written(ctx context.Context) (map[string][]string, error)
	Stop()
}

// Probe says when a resumed actor is ready: a command that exits 0 inside
// the sandbox, or an HTTP URL that answers 2xx, within Timeout.
type Probe struct {
	Command []string
	URL     string
	Timeout time.Duration
}

// Verification is how Resume proves a snapshot whole.
type Verification int

const (
	// VerifyBlocks reads every file and checks every block's SHA-256
	// before anything is restored.
	VerifyBlocks Verification = iota
	// VerifyWhileRestoring checks the files and sizes first, then hashes
	// every block on every core while the runtime restores, and refuses
	// the snapshot, removing the new sandbox, before it is reported ready:
	// a corrupt snapshot never resumes, and the hashing hides behind the
	// restore and the GPU step.
	VerifyWhileRestoring
	// VerifySizes checks the manifest, the file list and the sizes only
	// (snapshot.Check): for snapshots whose bytes were hash-checked as
	// they arrived (a pull from a store), where reading them again only
	// delays the restore.
	VerifySizes
)

// ResumeOptions tune Resume.
type ResumeOptions struct {
	// Verify is VerifyBlocks unless set.
	Verify Verification
	// DeviceMap restores GPU state onto other GPUs; when empty, the map the
	// compatibility check chose is used.
	DeviceMap gpu.DeviceMap
	Probe     Probe
	// Checked is the snapshot's manifest as the caller read it and had it
	// checked against this node (CheckRestore), as a pull from a store
	// does before it fetches anything: the folder is then checked against
	// it by size, and the compatibility step is not run again.
	Checked *snapshot.Manifest
	// Arriving, when set, says the folder's bytes are still arriving (a
	// pull read through a view, transfer.PullAndResume): the runtime's
	// restore loads memory in the background, as the bytes come, and once
	// the sandbox is restored (its GPU state too) the engine runs Arriving
	// as step StepArrived, before the probe: it returns once every byte of
	// the folder is there and checked and nothing reads through the view,
	// with what to report; its error fails the resume, and the new sandbox
	// is removed.
	Arriving func(context.Context) (string, error)
	// Prefetched says the caller ran Engine.Prefetch for this restore (a
	// pull does, before it reads the disk hard), or wants none: the resume
	// does not run it.
	Prefetched bool
	Observer   Observer
}

// Label is what messages and manifests call the actor: its Name, or its
// container id when it has none.
func (a Actor) Label() string { return cmp.Or(a.Name, a.ID) }

func (e *Engine) helperPath() string {
	if e.Helper != "" {
		return e.Helper
	}
	return bundle.HelperPath
}

func (e *Engine) followWait() time.Duration {
	if e.FollowWait > 0 {
		return e.FollowWait
	}
	return 10 * time.Second
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

// Step runs fn as step name of operation opName on actor, reported to obs
// as the engine's own steps are: for the steps callers sequence around the
// engine (a push to a store, a pull from one).
func (obs Observer) Step(actor, opName, name string, fn func() (string, error)) error {
	return op{actor: actor, name: opName, obs: obs}.step(name, fn)
}

// op runs an operation's steps and reports each to its observer.
type op struct {
	actor string
	name  string
	obs   Observer
}

func (o op) step(name string, fn func() (string, error)) error {
	if o.obs.Before != nil {
		if err := o.obs.Before(Step{Actor: o.actor, Op: o.name, Name: name}); err != nil {
			return fmt.Errorf("%s %s: %s was not started: %w", o.name, o.actor, name, err)
		}
	}
	return o.run(name, fn)
}

// undo runs a step that puts back what a failed step took, or finishes
// what cannot be taken back: it runs even when its Before fails.
func (o op) undo(name string, fn func() (string, error)) error {
	if o.obs.Before != nil {
		_ = o.obs.Before(Step{Actor: o.actor, Op: o.name, Name: name})
	}
	return o.run(name, fn)
}

func (o op) run(name string, fn func() (string, error)) error {
	start := time.Now()
	msg, err := fn()
	ev := Step{Actor: o.actor, Op: o.name, Name: name, Duration: time.Since(start), Message: msg}
	if err != nil {
		ev.Err = err.Error()
		err = fmt.Errorf("%s %s: %s: %w", o.name, o.actor, name, err)
	}
	o.notify(ev)
	return err
}

func (o op) notify(ev Step) {
	if o.obs.After != nil {
		o.obs.After(ev)
	}
}

func (o op) note(msg string) {
	o.notify(Step{Actor: o.actor, Op: o.name, Name: "note", Message: msg})
}

// ErrRefused marks a request refused before anything was touched.
var ErrRefused = errdefs.New(errdefs.ErrFailedPrecondition, "refused")
