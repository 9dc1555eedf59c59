package cuda

import "fmt"

// ProcessState is a CUprocessState: where a process stands in the driver's
// checkpoint state machine, RUNNING -lock-> LOCKED -checkpoint-> CHECKPOINTED
// -restore-> LOCKED -unlock-> RUNNING.
type ProcessState int32

const (
	StateRunning      ProcessState = 0
	StateLocked       ProcessState = 1
	StateCheckpointed ProcessState = 2
	StateFailed       ProcessState = 3
)

// String gives the word NVIDIA's cuda-checkpoint prints for the state.
func (s ProcessState) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateLocked:
		return "locked"
	case StateCheckpointed:
		return "checkpointed"
	case StateFailed:
		return "failed"
	}
	return fmt.Sprintf("unknown(%d)", int32(s))
}

// MarshalText makes states read as their words in JSON.
func (s ProcessState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a state from its word.
func (s *ProcessState) UnmarshalText(b []byte) error {
	for _, candidate := range []ProcessState{StateRunning, StateLocked, StateCheckpointed, StateFailed} {
		if string(b) == candidate.String() {
			*s = candidate
			return nil
		}
	}
	return fmt.Errorf("unknown CUDA process state %q", b)
}
