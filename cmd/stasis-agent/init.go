package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/runtime/microvm/initramfs"
)

// initMain sets up a bare guest as pid 1 and then only reaps: the serving
// agent is a child, so that its own children are waited for by it and not
// stolen by the reaper.
func initMain() int {
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
	var server *exec.Cmd
	if kernelArg("stasis.agent") != "off" {
		server = exec.Command("/proc/self/exe")
		server.Args = []string{"stasis-agent"}
		server.Stdout, server.Stderr = os.Stdout, os.Stderr
		if err := server.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "stasis-agent: start the server:", err)
			server = nil
		}
	}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.ECHILD {
			// Nothing left to reap; pid 1 must not exit, or the kernel panics.
			select {}
		}
		if err != nil || server == nil || pid != server.Process.Pid {
			continue
		}
		fmt.Fprintf(os.Stderr, "stasis-agent: the server ended (%v); the guest no longer answers the host\n", ws)
		server = nil
	}
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
