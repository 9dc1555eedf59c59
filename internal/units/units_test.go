package units

import (
	"errors"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"141GiB": 141 << 30, "512 MiB": 512 << 20, "8G": 8 << 30, "1.5GiB": 3 << 29, "4096": 4096, "0": 0} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "GiB", "-1GiB", "8 GB", "1e30TiB", "x", "lots", "1PiB"} {
		if _, err := ParseBytes(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseBytes(%q): %v; want an invalid argument", bad, err)
		}
	}
}

func TestBytes(t *testing.T) {
	if got := Bytes(uint64(3 << 29)); got != "1.5 GiB" {
		t.Fatalf("Bytes(1.5 GiB) = %q", got)
	}
}
