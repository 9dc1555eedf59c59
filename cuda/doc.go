// Package cuda binds the CUDA driver's process checkpoint API
// (cuCheckpointProcessLock, Checkpoint, Restore, Unlock, GetState and
// GetRestoreThreadId).
//
// The driver library is loaded at run time with dlopen, so programs that import
// this package build without the CUDA SDK and without cgo, and run on machines
// that have no GPU until they call Open. One Driver serves any number of target
// processes and goroutines. The checkpoint calls need no cuInit, so none is
// made unless the caller asks for it with Init.
//
// The argument structs are laid out as the driver expects them: every struct is
// 64 bytes and zeroed, and the restore arguments carry a device map (old GPU
// UUID to new) only when cuDriverGetVersion reports CUDA 13.0 or newer.
package cuda
