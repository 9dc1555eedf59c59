// Command stasis-agent is the guest agent of micro-VM actors. As a guest's
// /init (pid 1) it mounts the kernel filesystems, loads the kernel modules
// the initramfs lists, starts itself again to serve, and reaps orphans; run
// otherwise it serves. Serving means answering the host's runtime on the
// virtio-serial port org.stasis.agent: start the workload, run commands,
// report facts, and suspend or resume the guest's CUDA processes with
// stasis-cuda. It is a static binary so that it runs in a bare initramfs.
//
// Kernel command line: stasis.agent=off boots the guest without serving
// (for testing the host's handling of a guest without an agent).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

func main() {
	if os.Getpid() == 1 {
		os.Exit(initMain())
	}
	if len(os.Args) > 1 && os.Args[1] == "initramfs" {
		os.Exit(initramfsMain(os.Args[2:]))
	}
	os.Exit(serveMain(os.Args[1:]))
}

func serveMain(args []string) int {
	fs := flag.NewFlagSet("stasis-agent", flag.ContinueOnError)
	helperPath := fs.String("helper", bundle.HelperPath, "stasis-cuda's path in the guest")
	device := fs.String("nvidia-device", "/dev/nvidiactl", "the device file that tells the guest has an NVIDIA GPU")
	port := fs.String("port", agent.PortName, "the virtio-serial port to serve on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGTERM, os.Interrupt)
	defer stop()
	p, err := agent.OpenPort("/sys", "/dev", *port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent:", err)
		return 1
	}
	defer p.Close()
	s := &agent.Server{Helper: *helperPath, NVIDIADevice: *device, Output: os.Stdout}
	fmt.Fprintf(os.Stderr, "stasis-agent: serving on %s\n", *port)
	if err := s.Serve(ctx, p); err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent:", err)
		return 1
	}
	return 0
}

func kernelArg(name string) string {
	cmdline, _ := os.ReadFile("/proc/cmdline")
	for _, f := range strings.Fields(string(cmdline)) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
