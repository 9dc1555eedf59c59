package cuda

import (
	"errors"
	"fmt"
)

// Result is a CUresult: the status code every driver call returns. A non-zero
// Result is an error, so callers can test for one with errors.Is.
type Result int32

// The CUresult values this package and its callers act on. Any other value is
// still reported, with the name and message the driver gives it.
const (
	Success              Result = 0
	ErrorInvalidValue    Result = 1
	ErrorNotInitialized  Result = 3
	ErrorNoDevice        Result = 100
	ErrorInvalidDevice   Result = 101
	ErrorOperatingSystem Result = 304
	ErrorIllegalState    Result = 401
	ErrorNotFound        Result = 500
	ErrorNotSupported    Result = 801
	ErrorTimeout         Result = 909
	ErrorUnknown         Result = 999
	errorNameNotKnown           = "CUDA_ERROR_UNRECOGNIZED"
	errorMessageNotKnown        = "unrecognized error code"
)

func (r Result) Error() string { return fmt.Sprintf("CUresult %d", int32(r)) }

// Error is a failed driver call: which call, on which process, and what the
// driver said. It unwraps to its Result.
type Error struct {
	Op      string // the call, as cuda-checkpoint names it: "lock", "checkpoint", "get-state", ...
	PID     int    // the target process; 0 for calls that have none
	Code    Result
	Name    string // the driver's name for Code, such as CUDA_ERROR_NOT_INITIALIZED
	Message string // the driver's description of Code, such as "initialization error"
}

func (e *Error) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("cuda %s: %s (%s)", e.Op, e.Message, e.Name)
	}
	return fmt.Sprintf("cuda %s of pid %d: %s (%s)", e.Op, e.PID, e.Message, e.Name)
}

func (e *Error) Unwrap() error { return e.Code }

// ErrNoCheckpointAPI means the loaded libcuda does not export the checkpoint
// API, which arrived with CUDA 12.8 (driver 570).
var ErrNoCheckpointAPI = errors.New("the CUDA driver has no checkpoint API (needs CUDA 12.8, driver 570 or newer)")

// ErrDeviceMapUnsupported means a device map was given to a driver whose
// restore arguments cannot carry one (before CUDA 13.0, driver 580).
var ErrDeviceMapUnsupported = errors.New("the CUDA driver cannot restore onto other GPUs (a device map needs CUDA 13.0, driver 580 or newer)")
