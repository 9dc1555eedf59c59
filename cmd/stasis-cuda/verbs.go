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

	"github.com/stasis-run/stasis/cuda/group"
	"github.com/stasis-run/stasis/gpu"
)

// defaultLockTimeout bounds the wait for in-flight GPU work in Stasis's own
// verbs; a lock that times out leaves the process running.
const defaultLockTimeout = 30 * time.Second

func (c cli) verb(name string, args []string) int {
	fs := flag.NewFlagSet("stasis-cuda "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	all := fs.Bool("all", false, "act on every CUDA process in this pid namespace (required)")
	asJSON := fs.Bool("json", false, "print a JSON report on stdout")
	procRoot := fs.String("proc", "/proc", "the procfs to scan")
	var timeout time.Duration = defaultLockTimeout
	var deviceMap gpu.DeviceMap
	if name == "suspend" {
		fs.DurationVar(&timeout, "timeout", defaultLockTimeout, "how long a lock waits for running GPU work (0: no limit)")
	}
	if name == "resume" {
		fs.Func("device-map", "restore onto other GPUs: OLD_UUID=NEW_UUID,... naming every checkpointed GPU", func(v string) error {
			var err error
			deviceMap, err = gpu.ParseDeviceMap(v)
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

// group scans the pid namespace and runs the named group operation. The
// driver is not closed: the process exits right after, and unloading libcuda
// would only run its teardown for nothing.
func (c cli) group(ctx context.Context, op, procRoot string, opt group.Options, progress bool) (group.Report, error) {
	start := time.Now()
	rep := group.Report{Op: op, Steps: map[string]time.Duration{}}
	finish := func(step string, since time.Time, err error) (group.Report, error) {
		rep.Steps[step] = time.Since(since)
		rep.DurationNs = time.Since(start)
		return rep, err
	}
	d, err := c.open()
	if err != nil {
		return finish("open", start, err)
	}
	rep.Steps["open"] = time.Since(start)
	rep.DriverVersion, rep.Library = d.Version(), d.Path()
	scanStart := time.Now()
	procs, err := group.Scanner{Driver: d, ProcRoot: procRoot, Exclude: []int{c.self}}.Scan()
	if err != nil {
		return finish("scan", scanStart, err)
	}
	rep.Steps["scan"] = time.Since(scanStart)
	if progress {
		opt.Progress = func(o group.Outcome) { printOutcome(c.stderr, o) }
	}
	opStart := time.Now()
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
	return finish(op, opStart, err)
}

func printOutcome(w io.Writer, o group.Outcome) {
	if o.Err != "" {
		fmt.Fprintf(w, "pid %d: %s -> %s after %s: %s\n", o.PID, o.Before, o.After, o.Duration.Round(time.Millisecond), o.Err)
		return
	}
	fmt.Fprintf(w, "pid %d: %s -> %s in %s\n", o.PID, o.Before, o.After, o.Duration.Round(time.Millisecond))
}

// done words a finished group operation.
func done(op string) string {
	if op == "suspend" {
		return "suspended"
	}
	return "resumed"
}

func printReport(w io.Writer, rep group.Report) {
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
		fmt.Fprintf(w, "%s %d CUDA process(es) in %s\n", done(rep.Op), len(rep.Outcomes), rep.DurationNs.Round(time.Millisecond))
	}
}
