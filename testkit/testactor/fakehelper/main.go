// Command fakehelper stands in for stasis-cuda inside CPU test sandboxes,
// where no GPU exists. It answers --help, and "suspend"/"resume" with a JSON
// report; it appends each verb to /stasis-ctl/calls and fails a verb when
// the file /stasis-ctl/fail-<verb> exists. /stasis-ctl is a host folder the
// test mounts, so the test both steers the helper and sees what it was asked.
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

// report is the part of stasis-cuda's JSON report that the engine reads. The
// cuda packages are not imported: they link the binary against glibc, which
// the test sandboxes do not have.
type report struct {
	Op            string `json:"op"`
	DriverVersion int    `json:"driverVersion"`
	Error         string `json:"error,omitempty"`
}

const ctl = "/stasis-ctl"

func main() {
	if len(os.Args) < 2 || os.Args[1] == "--help" {
		fmt.Println("fakehelper: suspend|resume --all --json")
		return
	}
	verb := os.Args[1]
	f, err := os.OpenFile(ctl+"/calls", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		fmt.Fprintln(f, verb)
		f.Close()
	}
	rep := report{Op: verb, DriverVersion: 13000}
	code := 0
	if _, err := os.Stat(ctl + "/fail-" + verb); err == nil {
		rep.Error = "injected failure: " + verb + " failed for 1 process(es); pid 7: cuda " + verb + " of pid 7: injected (CUDA_ERROR_UNKNOWN); every process was put back as it was"
		code = 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	os.Exit(code)
}
