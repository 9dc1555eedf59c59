package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/cuda/group"
)

// defaultLockTimeout bounds the wait for in-flight GPU work in Stasis's own
// verbs; a lock that times out leaves the process running.
const defaultLockTimeout = 30 * time.Second

// report is what the verbs print with --json.
type report struct {
	Op            string          `json:"op"`
	DriverVersion int             `json:"driverVersion"`
	Library       string          `json:"library"`
	Processes     []group.Process `json:"processes,omitempty"`
	Outcomes      []group.Outcome `json:"outcomes,omitempty"`
	DurationNs    time.Duration   `json:"durationNs"`
	Error         string          `json:"error,omitempty"`
}

func (c cli) verb(name string, args []string) int {
	fs := flag.NewFlagSet("stasis-cuda "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	all := fs.Bool("all", false, "act on every CUDA process in this pid namespace (required)")
	asJSON := fs.Bool("json", false, "print a JSON report on stdout")
	procRoot := fs.String("proc", "/proc", "the procfs to scan")
	var timeout time.Duration = defaultLockTimeout
	var deviceMap cuda.DeviceMap
	if name == "suspend" {
		fs.DurationVar(&timeout, "timeout", defaultLockTimeout, "how long a lock waits for running GPU work (0: no limit)")
	}
	if name == "resume" {
		fs.Func("device-map", "restore onto other GPUs: OLD_UUID=NEW_UUID,... naming every checkpointed GPU", func(v string) error {
			var err error
			deviceMap, err = cuda.ParseDeviceMap(v)
			return err
		})
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if !*all || fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "stasis-cuda %s acts on every CUDA process: give --all (for one process use --pid with --toggle or --action)\n", name)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := c.group(ctx, name, *procRoot, group.Options{LockTimeout: timeout, DeviceMap: deviceMap}, !*asJSON)
	if err != nil {
		rep.Error = err.Error()
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printReport(c.stdout, rep)
		if err != nil {
			fmt.Fprintf(c.stderr, "stasis-cuda %s: %v\n", name, err)
		}
	}
	if err != nil {
		return 1
	}
	return 0
}

// group scans the pid namespace and runs the named group operation.
func (c cli) group(ctx context.Context, op, procRoot string, opt group.Options, progress bool) (report, error) {
	start := time.Now()
	rep := report{Op: op}
	defer func() { rep.DurationNs = time.Since(start) }()
	d, err := c.open()
	if err != nil {
		return rep, err
	}
	defer d.Close()
	rep.DriverVersion, rep.Library = d.Version(), d.Path()
	procs, err := group.Scanner{Driver: d, ProcRoot: procRoot, Exclude: []int{c.self}}.Scan()
	if err != nil {
		return rep, err
	}
	if progress {
		opt.Progress = func(o group.Outcome) {
			if o.Err != "" {
				fmt.Fprintf(c.stderr, "pid %d: %s -> %s after %s: %s\n", o.PID, o.Before, o.After, o.Duration.Round(time.Millisecond), o.Err)
				return
			}
			fmt.Fprintf(c.stderr, "pid %d: %s -> %s in %s\n", o.PID, o.Before, o.After, o.Duration.Round(time.Millisecond))
		}
	}
	switch op {
	case "status":
		rep.Processes = procs
	case "suspend":
		rep.Processes = group.ToSuspend(procs)
		rep.Outcomes, err = group.Suspend(ctx, d, rep.Processes, opt)
	case "resume":
		rep.Processes = group.ToResume(procs)
		rep.Outcomes, err = group.Resume(ctx, d, rep.Processes, opt)
	}
	rep.DurationNs = time.Since(start)
	return rep, err
}

// done words a finished group operation.
var done = map[string]string{"suspend": "suspended", "resume": "resumed"}

func printReport(w io.Writer, rep report) {
	if rep.Op == "status" {
		if len(rep.Processes) == 0 {
			fmt.Fprintln(w, "no CUDA processes")
		}
		for _, p := range rep.Processes {
			fmt.Fprintf(w, "%-8d %-14s %s\n", p.PID, p.State, p.Command)
		}
		return
	}
	if rep.Error == "" {
		fmt.Fprintf(w, "%s %d CUDA process(es) in %s\n", done[rep.Op], len(rep.Outcomes), rep.DurationNs.Round(time.Millisecond))
	}
}
