// Package snapshot describes a snapshot folder and proves it whole.
//
// A snapshot folder holds the files a runtime wrote (a checkpoint image, or a
// copy of an actor's durable folders) and manifest.json, which lists every
// file with its size, mode and SHA-256 block digests, plus what a restore
// needs to know: the scope, the runtime and its flags, the GPU driver. The
// manifest is written last, after every file is synced, and atomically, so a
// folder with a manifest is a complete snapshot and one without is not one.
package snapshot

import (
	"time"

	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/gpu"
	"github.com/stasis-run/stasis/runtime"
)

// FormatVersion is the manifest format this package writes and reads.
const FormatVersion = 1

// ManifestName is the manifest's file name inside a snapshot folder.
const ManifestName = "manifest.json"

// BlockSize is the span each SHA-256 digest of a file covers. Digests of
// blocks, not of whole files, let a multi-gigabyte image be hashed and
// verified on every core at once.
const BlockSize = 64 << 20

// Scope is what a snapshot holds.
type Scope string

const (
	// ScopeFull holds process memory, GPU state and the root filesystem
	// overlay: a resume continues the same processes.
	ScopeFull Scope = "Full"
	// ScopeData holds only the actor's durable folders: a resume boots the
	// actor afresh with those folders as they were.
	ScopeData Scope = "Data"
)

// Manifest describes one snapshot.
type Manifest struct {
	FormatVersion int       `json:"formatVersion"`
	Scope         Scope     `json:"scope"`
	Actor         string    `json:"actor"`
	CreatedAt     time.Time `json:"createdAt"`
	Runtime       Runtime   `json:"runtime"`
	// GPU is set for snapshots of GPU actors.
	GPU *GPU `json:"gpu,omitempty"`
	// Guest is set for snapshots of VMs: the guest they hold and what it
	// needs from the host that restores it.
	Guest *runtime.Guest `json:"guest,omitempty"`
	// Node is the fingerprint of the node the snapshot was taken on, which
	// a restore is checked against (package compat).
	Node *fingerprint.Fingerprint `json:"node,omitempty"`
	// DurableDirs maps each durable folder inside the sandbox to the
	// snapshot subfolder holding its copy (Data scope).
	DurableDirs map[string]string `json:"durableDirs,omitempty"`
	// OpenFiles are the paths, inside the sandbox, of the files of its
	// root file system and mounts that the runtime held open when it was
	// checkpointed (at most MaxOpenFiles, each absolute and clean). A
	// restore opens each again, one after another; their metadata read
	// first, all at once, keeps those opens from waiting behind a pull's
	// reads of the same disk.
	OpenFiles []string `json:"openFiles,omitempty"`
	// FirstReads are stretches of the files the sandbox held that it read
	// from its node's disk after its last resume (those of earlier
	// resumes kept): a restored server's first requests fault its
	// libraries' pages in one after another, and a resume reads these in
	// bulk instead, once its image is in and before the sandbox is
	// reported ready. In order of path and offset, apart, at most
	// MaxFirstReads stretches and MaxFirstReadBytes in all; none where no
	// resume of this engine could tell.
	FirstReads []FileRange `json:"firstReads,omitempty"`
	Files      []File      `json:"files"`
}

// MaxOpenFiles bounds Manifest.OpenFiles.
const MaxOpenFiles = 1 << 16

// Bounds of Manifest.FirstReads: more is no longer what a first request
// needs, and reading it before the sandbox is ready would cost more than
// its faults.
const (
	MaxFirstReads     = 1 << 16
	MaxFirstReadBytes = 1 << 30
)

// FileRange is a stretch of a file: Length bytes from Offset.
type FileRange struct {
	// Path is inside the sandbox, absolute and clean.
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// Runtime is the runtime a snapshot was taken with; Full snapshots restore
// only into the same build.
type Runtime struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Flags are the runtime's global flags, CheckpointFlags those given to
	// the checkpoint itself.
	Flags           []string `json:"flags,omitempty"`
	CheckpointFlags []string `json:"checkpointFlags,omitempty"`
	// ImageDir is the folder, relative to the snapshot, holding the image.
	ImageDir string `json:"imageDir,omitempty"`
}

// GPU is what a GPU actor's snapshot needs from the node that restores it.
type GPU struct {
	DriverVersion string `json:"driverVersion"`
	// CUDADriverAPI is cuDriverGetVersion's number, such as 13000.
	CUDADriverAPI int `json:"cudaDriverAPI,omitempty"`
	// NvproxyABI is the driver ABI runsc ran the sandbox with (the host's
	// own or the configured one).
	NvproxyABI string `json:"nvproxyABI,omitempty"`
	// Processes is how many CUDA processes were checkpointed.
	Processes int `json:"processes"`
	// Path is how the GPU state was moved: GPUPathExec (the helper run in
	// the sandbox by the engine; also when empty, as older snapshots) or
	// GPUPathRuntime (by the runtime itself, runsc's
	// --cuda-checkpoint-path, which puts it back at restore).
	Path string `json:"path,omitempty"`
	// Devices are the GPUs the actor's processes used, with the device
	// memory they held: a restore needs a GPU of the same model with that
	// much free for each.
	Devices []gpu.Usage `json:"devices,omitempty"`
}

// The GPU paths a snapshot records.
const (
	GPUPathExec    = "exec"
	GPUPathRuntime = "runtime"
)

// Size is the bytes of every file of the snapshot.
func (m *Manifest) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// File is one file of a snapshot.
type File struct {
	// Path is relative to the snapshot folder, with forward slashes.
	Path   string   `json:"path"`
	Size   int64    `json:"size"`
	Mode   uint32   `json:"mode"`
	Blocks []string `json:"sha256Blocks"`
}
