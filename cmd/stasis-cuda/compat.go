package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/helper"
	"github.com/stasis-run/stasis/gpu"
)

// compatUsage mirrors cuda-checkpoint's help, plus Stasis's own verbs.
const compatUsage = `Usage: stasis-cuda [OPTION]... --pid PID
       stasis-cuda suspend|resume|status --all [--json] ...   (see stasis-cuda suspend --help)

A drop-in replacement for NVIDIA's cuda-checkpoint.

Operations (exactly one):
      --toggle              checkpoint a running process, or restore a checkpointed one
      --action ACTION       one step: lock, checkpoint, restore or unlock
      --get-state           print the process's state: running, locked, checkpointed or failed
      --get-restore-tid     print the id of the thread that a restore runs on
  -h, --help                print this help

Options:
  -p, --pid PID             the process to act on
  -t, --timeout MS          how long a lock waits for the process's GPU work (0: no limit)
  -d, --device-map OLD=NEW,...
                            restore onto other GPUs, naming every checkpointed GPU by UUID
      --version             print stasis-cuda's version and the CUDA driver it found
`

type compatArgs struct {
	op        string // "toggle", "get-state", "get-restore-tid", or an action
	pid       int
	timeoutMs uint32
	deviceMap gpu.DeviceMap
	help      bool
}

// parseCompat reads cuda-checkpoint's options the way getopt_long does:
// "--opt value", "--opt=value", "-p value" and "-pvalue".
func parseCompat(args []string) (compatArgs, error) {
	var a compatArgs
	pidSet := false
	setOp := func(op string) error {
		if a.op != "" {
			return fmt.Errorf("only one operation at a time (got --%s after --%s)", op, a.op)
		}
		a.op = op
		return nil
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		name, value, hasValue := arg, "", false
		switch {
		case strings.HasPrefix(arg, "--"):
			name, value, hasValue = strings.Cut(arg, "=")
		case len(arg) > 2 && arg[0] == '-':
			name, value, hasValue = arg[:2], arg[2:], true
		}
		needValue := func() (string, error) {
			if hasValue {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("option %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-h", "--help":
			a.help = true
		case "--toggle", "--get-state", "--get-restore-tid":
			err = setOp(strings.TrimPrefix(name, "--"))
		case "--action":
			var v string
			if v, err = needValue(); err == nil {
				switch v {
				case "lock", "checkpoint", "restore", "unlock":
					err = setOp(v)
				default:
					err = fmt.Errorf("unknown action %q: want lock, checkpoint, restore or unlock", v)
				}
			}
		case "-p", "--pid":
			var v string
			if v, err = needValue(); err == nil {
				a.pid, err = strconv.Atoi(v)
				if err != nil || a.pid <= 0 {
					err = fmt.Errorf("invalid pid %q", v)
				}
				pidSet = true
			}
		case "-t", "--timeout":
			var v string
			if v, err = needValue(); err == nil {
				var ms uint64
				ms, err = strconv.ParseUint(v, 10, 32)
				if err != nil {
					err = fmt.Errorf("invalid timeout %q: want milliseconds", v)
				}
				a.timeoutMs = uint32(ms)
			}
		case "-d", "--device-map":
			var v string
			if v, err = needValue(); err == nil {
				a.deviceMap, err = gpu.ParseDeviceMap(v)
			}
		default:
			err = fmt.Errorf("unknown option %q", arg)
		}
		if err != nil {
			return a, err
		}
	}
	if a.help {
		return a, nil
	}
	if a.op == "" {
		return a, errors.New("no operation given")
	}
	if !pidSet {
		return a, errors.New("no process given: use --pid PID")
	}
	if len(a.deviceMap) > 0 && a.op != "restore" && a.op != "toggle" {
		return a, fmt.Errorf("--device-map applies to a restore, not to --%s", a.op)
	}
	return a, nil
}

// compat runs one cuda-checkpoint style operation: silent on success, one
// line naming the operation, the pid and the driver's message on failure,
// exit status 1 for every failure, as cuda-checkpoint does.
func (c cli) compat(args []string) int {
	a, err := parseCompat(args)
	if a.help {
		fmt.Fprint(c.stdout, compatUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(c.stderr, "%v\n\n%s", err, compatUsage)
		return 1
	}
	d, err := c.open()
	if err != nil {
		fmt.Fprintf(c.stderr, "%v\n", err)
		return 1
	}

	switch a.op {
	case "get-state":
		s, err := d.State(a.pid)
		if err != nil {
			return c.compatFail("Error getting process state for process ID %d", a.pid, err)
		}
		fmt.Fprintln(c.stdout, s)
	case "get-restore-tid":
		tid, err := d.RestoreThreadID(a.pid)
		if err != nil {
			return c.compatFail("Error getting restore thread ID for process ID %d", a.pid, err)
		}
		fmt.Fprintln(c.stdout, tid)
	case "toggle":
		return c.toggle(d, a)
	default:
		if err := action(d, a.op, a); err != nil {
			return c.compatFail("Could not "+a.op+" on process ID %d", a.pid, err)
		}
	}
	return 0
}

// toggle checkpoints a running process (lock, then checkpoint) or restores a
// checkpointed one (restore, then unlock). A lock-step failure after which the
// process is left locked is undone, so --toggle never leaves a process frozen.
// With no --device-map (runsc, which runs --toggle after a restore, passes
// none), a restore takes the map from helper.DeviceMapEnv, and says so on
// stderr; with no --timeout, a lock waits at most helper.LockTimeoutEnv.
func (c cli) toggle(d *cuda.Driver, a compatArgs) int {
	s, err := d.State(a.pid)
	if err != nil {
		return c.compatFail("Error getting process state for process ID %d", a.pid, err)
	}
	var steps []string
	switch s {
	case cuda.StateRunning:
		steps = []string{"lock", "checkpoint"}
		if a.timeoutMs == 0 {
			if v := c.getenv(helper.LockTimeoutEnv); v != "" {
				t, err := time.ParseDuration(v)
				if err != nil || t < 0 {
					fmt.Fprintf(c.stderr, "Could not toggle process ID %d: %s=%q: want a duration such as 30s\n", a.pid, helper.LockTimeoutEnv, v)
					return 1
				}
				a.timeoutMs = uint32(min(t.Milliseconds(), int64(^uint32(0))))
			}
		}
	case cuda.StateCheckpointed:
		steps = []string{"restore", "unlock"}
		if len(a.deviceMap) == 0 {
			if v := c.getenv(helper.DeviceMapEnv); v != "" {
				if a.deviceMap, err = gpu.ParseDeviceMap(v); err != nil {
					fmt.Fprintf(c.stderr, "Could not toggle process ID %d: %s: %v\n", a.pid, helper.DeviceMapEnv, err)
					return 1
				}
				fmt.Fprintf(c.stderr, "stasis-cuda: restoring process ID %d with device map %s (from %s)\n", a.pid, a.deviceMap, helper.DeviceMapEnv)
			}
		}
	default:
		fmt.Fprintf(c.stderr, "Could not toggle process ID %d: it is %s; use --action to move it on\n", a.pid, s)
		return 1
	}
	for i, step := range steps {
		if err := action(d, step, a); err != nil {
			if i == 1 && step == "checkpoint" {
				_ = d.Unlock(a.pid)
			}
			return c.compatFail("Could not "+step+" on process ID %d", a.pid, err)
		}
	}
	return 0
}

func action(d *cuda.Driver, op string, a compatArgs) error {
	switch op {
	case "lock":
		return d.Lock(a.pid, a.timeoutMs)
	case "checkpoint":
		return d.Checkpoint(a.pid)
	case "restore":
		return d.Restore(a.pid, a.deviceMap)
	case "unlock":
		return d.Unlock(a.pid)
	}
	return fmt.Errorf("unknown action %q", op)
}

// compatFail prints cuda-checkpoint's failure line: the driver's own message
// in double quotes, or our reason when the driver was never asked.
func (c cli) compatFail(format string, pid int, err error) int {
	msg := err.Error()
	var cerr *cuda.Error
	if errors.As(err, &cerr) {
		msg = cerr.Message
	}
	fmt.Fprintf(c.stderr, format+": \"%s\"\n", pid, msg)
	return 1
}
