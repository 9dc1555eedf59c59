package fleet

import (
	"strings"
	"testing"
)

// TestServiceName: every actor name the API server accepts (a DNS
// subdomain, up to 253 characters) gets a valid Service name of its own.
func TestServiceName(t *testing.T) {
	long := strings.Repeat("a", 250)
	cases := map[string]string{"w1": "w1", "counter-7": "counter-7"}
	names := []string{"w1", "counter-7", "w.1", "w-1", "7up", "a.b.c", long + "x", long + "y", strings.Repeat("b", 63), strings.Repeat("b", 64), "x" + strings.Repeat(".y", 100)}
	seen := map[string]string{}
	for _, n := range names {
		s := ServiceName(n)
		if !serviceName.MatchString(s) {
			t.Errorf("actor %q: Service name %q is not a DNS label starting with a letter", n, s)
		}
		if want, ok := cases[n]; ok && s != want {
			t.Errorf("actor %q: Service name %q, want its own name", n, s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("actors %q and %q: one Service name %q", n, other, s)
		}
		seen[s] = n
		if ServiceName(n) != s {
			t.Errorf("actor %q: Service name not stable", n)
		}
	}
}
