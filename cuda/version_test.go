package cuda

import "testing"

func TestFormatVersion(t *testing.T) {
	for v, want := range map[int]string{13000: "13.0", 12080: "12.8", 12090: "12.9"} {
		if got := FormatVersion(v); got != want {
			t.Errorf("FormatVersion(%d) = %q, want %q", v, got, want)
		}
	}
}
