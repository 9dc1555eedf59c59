package runscid

import "testing"

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"a1": true, "+a1+": true, "d.x": true, "web_1-b": true,
		"": false, ".": false, "..": false, "a/b": false, "../x": false, "a b": false, "a\x00": false,
	} {
		if got := Valid(id); got != want {
			t.Errorf("Valid(%q) = %v, want %v", id, got, want)
		}
	}
}
