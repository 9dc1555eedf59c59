package helper_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/cuda/helper"
)

func TestArgs(t *testing.T) {
	for _, c := range []struct {
		verb string
		opts helper.Options
		want []string
	}{
		{helper.Suspend, helper.Options{LockTimeout: 30 * time.Second, DeviceMap: "ignored", Prefault: 8}, []string{"/h", "suspend", "--all", "--json", "--timeout", "30s"}},
		{helper.Suspend, helper.Options{}, []string{"/h", "suspend", "--all", "--json"}},
		{helper.Resume, helper.Options{LockTimeout: time.Second, DeviceMap: "GPU-a=GPU-b"}, []string{"/h", "resume", "--all", "--json", "--device-map", "GPU-a=GPU-b"}},
		{helper.Resume, helper.Options{Prefault: 16}, []string{"/h", "resume", "--all", "--json", "--prefault", "16"}},
		{helper.Status, helper.Options{LockTimeout: time.Second, DeviceMap: "GPU-a=GPU-b", Prefault: 8}, []string{"/h", "status", "--all", "--json"}},
	} {
		if got := helper.Args("/h", c.verb, c.opts); !slices.Equal(got, c.want) {
			t.Errorf("%s %+v: %q, want %q", c.verb, c.opts, got, c.want)
		}
	}
}

func TestResult(t *testing.T) {
	raw, err := helper.Result("suspend", 0, []byte(`{"op":"suspend","driverVersion":13000}`), nil)
	if err != nil || !strings.Contains(string(raw), `"driverVersion":13000`) {
		t.Fatalf("good run: %s %v", raw, err)
	}
	for _, c := range []struct {
		name           string
		exit           int
		stdout, stderr string
		want           string
	}{
		{"the report's error", 1, `{"op":"suspend","error":"pid 7: locked"}`, "", "stasis-cuda suspend: pid 7: locked"},
		{"exit without an error in the report", 2, `{"op":"suspend"}`, "bad flag\n", "stasis-cuda suspend: exit 2: bad flag"},
		{"no report", 127, "", "sh: stasis-cuda: not found\n", "stasis-cuda suspend exited 127 without a report: sh: stasis-cuda: not found"},
	} {
		if _, err := helper.Result("suspend", c.exit, []byte(c.stdout), []byte(c.stderr)); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
