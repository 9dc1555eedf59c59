package api

import (
	"regexp"
	"strings"
	"testing"
)

// TestNewActorID: one rule for new actor ids, whoever makes them: a valid
// actor id whatever the template's length, random without a request id,
// the same for the same request id.
func TestNewActorID(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	long := strings.Repeat("t", 63)
	for _, tpl := range []string{"counter", long} {
		a, b := NewActorID(tpl, ""), NewActorID(tpl, "")
		if !valid.MatchString(a) || a == b {
			t.Fatalf("template %q: ids %q and %q", tpl, a, b)
		}
		if r1, r2 := NewActorID(tpl, "req-1"), NewActorID(tpl, "req-1"); r1 != r2 || !valid.MatchString(r1) || r1 == NewActorID(tpl, "req-2") {
			t.Fatalf("template %q: ids of request req-1 %q and %q", tpl, r1, r2)
		}
	}
}
