// Package helper is stasis-cuda's group verbs as other programs call them:
// the command line of a suspend or resume of every CUDA process, and the
// JSON report it prints. The engine runs it inside gVisor sandboxes and the
// guest agent inside micro-VMs. It does not import the CUDA binding, so a
// static binary (the guest agent) can use it.
package helper

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DeviceMapEnv names the environment variable from which stasis-cuda's
// --toggle takes the device map of a restore when none is given on its
// command line: a runtime that runs --toggle itself after a restore (runsc's
// --cuda-checkpoint-path) passes no --device-map, and the engine sets this
// in the restore's environment instead.
const DeviceMapEnv = "STASIS_CUDA_DEVICE_MAP"

// PrefaultEnv names the environment variable that has --toggle read a
// checkpointed process's memory on that many threads before restoring it
// (runsc's own CUDA step passes no flags), as resume's --prefault does.
const PrefaultEnv = "STASIS_CUDA_PREFAULT"

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

// Options are the settings of one group operation's command line.
type Options struct {
	// LockTimeout bounds a suspend's wait for running GPU work.
	LockTimeout time.Duration
	// DeviceMap (OLD=NEW,...) moves a resume's state onto other GPUs.
	DeviceMap string
	// Prefault has a resume read the processes' memory on that many
	// threads before the restore (0: not).
	Prefault int
}

// Args is the command line that runs verb on every CUDA process with a JSON
// report, as opts say; status changes nothing.
func Args(path, verb string, opts Options) []string {
	argv := []string{path, verb, "--all", "--json"}
	if verb == Suspend && opts.LockTimeout > 0 {
		argv = append(argv, "--timeout", opts.LockTimeout.String())
	}
	if verb == Resume && opts.DeviceMap != "" {
		argv = append(argv, "--device-map", opts.DeviceMap)
	}
	if verb == Resume && opts.Prefault > 0 {
		argv = append(argv, "--prefault", strconv.Itoa(opts.Prefault))
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
