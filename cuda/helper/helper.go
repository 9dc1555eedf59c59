// Package helper is stasis-cuda's group verbs as other programs call them:
// the command line of a suspend or resume of every CUDA process, and the
// JSON report it prints. The engine runs it inside gVisor sandboxes and the
// guest agent inside micro-VMs. It does not import the CUDA binding, so a
// static binary (the guest agent) can use it.
package helper

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// DeviceMapEnv names the environment variable from which stasis-cuda's
// --toggle takes the device map of a restore when none is given on its
// command line: a runtime that runs --toggle itself after a restore (runsc's
// --cuda-checkpoint-path) passes no --device-map, and the engine sets this
// in the restore's environment instead.
const DeviceMapEnv = "STASIS_CUDA_DEVICE_MAP"

// LockTimeoutEnv names the environment variable that bounds --toggle's lock
// when no --timeout is given, as a Go duration (such as 30s).
const LockTimeoutEnv = "STASIS_CUDA_LOCK_TIMEOUT"

// Verbs of the group operations, and the report of where every CUDA
// process stands.
const (
	Suspend = "suspend"
	Resume  = "resume"
	Status  = "status"
)

// Args is the command line that runs verb on every CUDA process with a JSON
// report: a suspend waits at most lockTimeout for running GPU work, a
// resume moves state by deviceMap (OLD=NEW,...) when it is not empty, and
// status changes nothing.
func Args(path, verb string, lockTimeout time.Duration, deviceMap string) []string {
	argv := []string{path, verb, "--all", "--json"}
	if verb == Suspend && lockTimeout > 0 {
		argv = append(argv, "--timeout", lockTimeout.String())
	}
	if verb == Resume && deviceMap != "" {
		argv = append(argv, "--device-map", deviceMap)
	}
	return argv
}

// Result reads what a run of Args printed: the report, and an error naming
// the verb when the run failed or printed no report.
func Result(verb string, exitCode int, stdout, stderr []byte) (json.RawMessage, error) {
	var rep struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(stdout, &rep); err != nil {
		return nil, fmt.Errorf("stasis-cuda %s exited %d without a report: %s", verb, exitCode, strings.TrimSpace(string(stderr)))
	}
	raw := json.RawMessage(stdout)
	if exitCode != 0 || rep.Error != "" {
		if rep.Error == "" {
			rep.Error = fmt.Sprintf("exit %d: %s", exitCode, strings.TrimSpace(string(stderr)))
		}
		return raw, fmt.Errorf("stasis-cuda %s: %s", verb, rep.Error)
	}
	return raw, nil
}
