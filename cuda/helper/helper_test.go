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
		verb    string
		timeout time.Duration
		devmap  string
		want    []string
	}{
		{helper.Suspend, 30 * time.Second, "ignored", []string{"/h", "suspend", "--all", "--json", "--timeout", "30s"}},
		{helper.Suspend, 0, "", []string{"/h", "suspend", "--all", "--json"}},
		{helper.Resume, time.Second, "GPU-a=GPU-b", []string{"/h", "resume", "--all", "--json", "--device-map", "GPU-a=GPU-b"}},
		{helper.Status, time.Second, "GPU-a=GPU-b", []string{"/h", "status", "--all", "--json"}},
	} {
		if got := helper.Args("/h", c.verb, c.timeout, c.devmap); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.verb, got, c.want)
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
