// Command stasis-cuda moves the CUDA state of processes between their GPUs and
// their host memory through the CUDA driver's checkpoint API. It takes the
// command line of NVIDIA's cuda-checkpoint (so runsc's --cuda-checkpoint-path
// can point at it), Stasis's own verbs that act on every CUDA process of the
// pid namespace at once, and runsc's save/restore hook mode.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/stasis-run/stasis/cuda"
	"github.com/stasis-run/stasis/internal/buildinfo"
)

// hookModeEnv is how runsc's -save-restore-exec-argv tells its helper which
// step it is at; it is the only variable runsc gives the helper.
const hookModeEnv = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"

// libraryEnv names a libcuda to load instead of searching for one.
const libraryEnv = "STASIS_CUDA_LIBRARY"

type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	self           int
}

func main() {
	c := cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, self: os.Getpid()}
	os.Exit(c.run(os.Args[1:]))
}

func (c cli) run(args []string) int {
	if mode := c.getenv(hookModeEnv); mode != "" {
		return c.hook(mode)
	}
	if len(args) > 0 {
		switch args[0] {
		case "suspend", "resume", "status":
			return c.verb(args[0], args[1:])
		case "version", "--version":
			return c.version()
		}
	}
	return c.compat(args)
}

func (c cli) open() (*cuda.Driver, error) {
	d, err := cuda.Open(c.getenv(libraryEnv))
	if err != nil && c.getenv(libraryEnv) == "" {
		return nil, fmt.Errorf("%w (or set %s to the library's path)", err, libraryEnv)
	}
	return d, err
}

func (c cli) version() int {
	fmt.Fprintf(c.stdout, "stasis-cuda %s\n", buildinfo.Version())
	d, err := c.open()
	if err != nil {
		fmt.Fprintf(c.stdout, "CUDA driver: not loaded: %v\n", err)
		return 0
	}
	defer d.Close()
	fmt.Fprintf(c.stdout, "CUDA driver API %s (%d) from %s\n", cuda.FormatVersion(d.Version()), d.Version(), d.Path())
	return 0
}
