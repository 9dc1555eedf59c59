package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/runtime/microvm/initramfs"
)

// initMain sets up a bare guest as pid 1 and then only reaps: the serving
// agent is a child, so that its own children are waited for by it and not
// stolen by the reaper.
func initMain() int {
	// The first line on the console: the host tells a guest that never got
	// here by its silence.
	fmt.Fprintln(os.Stderr, "stasis-agent: up as /init")
	// The kernel starts /init with no PATH; commands the host runs are
	// looked up in it.
	_ = os.Setenv("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
	for _, m := range []struct{ fstype, target string }{
		{"devtmpfs", "/dev"}, {"proc", "/proc"}, {"sysfs", "/sys"}, {"tmpfs", "/run"}, {"tmpfs", "/tmp"},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "stasis-agent: %s: %v\n", m.target, err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			fmt.Fprintf(os.Stderr, "stasis-agent: mount %s: %v\n", m.target, err)
		}
	}
	loadModules("/" + initramfs.ModulesList)
	serve := kernelArg("stasis.agent") != "off"
	server := startServer(serve)
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.ECHILD {
			// Nothing to reap now. Pid 1 must never exit (the kernel would
			// panic), and blocking for good would read as a deadlock to Go's
			// runtime, which then exits.
			time.Sleep(restartDelay)
			continue
		}
		if err != nil || server == nil || pid != server.Process.Pid {
			continue
		}
		// The server ends only on an error it cannot serve past (a broken
		// port, a request line over its limit); the host must keep its way
		// in, so it is started again, after a pause that keeps a server
		// failing at once from spinning.
		fmt.Fprintf(os.Stderr, "stasis-agent: the server ended (%v); starting it again\n", ws)
		time.Sleep(restartDelay)
		server = startServer(serve)
	}
}

// restartDelay spaces the server's restarts.
const restartDelay = time.Second

func startServer(serve bool) *exec.Cmd {
	if !serve {
		return nil
	}
	server := exec.Command("/proc/self/exe")
	server.Args = []string{"stasis-agent"}
	server.Stdout, server.Stderr = os.Stdout, os.Stderr
	if err := server.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent: start the server:", err)
		return nil
	}
	return server
}

// loadModules loads every module the initramfs lists; one that fails is
// reported and the rest are still tried.
func loadModules(list string) {
	data, err := os.ReadFile(list)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent: kernel modules:", err)
		return
	}
	for _, path := range strings.Fields(string(data)) {
		f, err := os.Open(path)
		if err == nil {
			err = unix.FinitModule(int(f.Fd()), "", 0)
			f.Close()
		}
		if err != nil && err != unix.EEXIST {
			fmt.Fprintf(os.Stderr, "stasis-agent: load %s: %v\n", path, err)
		}
	}
}
