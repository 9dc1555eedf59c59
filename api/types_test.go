package api

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/errdefs"
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

// TestWarmingActorID: two templates whose long names share a prefix get
// warming actors of their own, each a valid actor id that no Kubernetes
// object can name, the same for the same request.
func TestWarmingActorID(t *testing.T) {
	valid := regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	a, b := strings.Repeat("t", 62)+"a", strings.Repeat("t", 62)+"b"
	ids := map[string]WarmRequest{}
	for _, r := range []WarmRequest{{Template: "counter"}, {Template: a}, {Template: b}, {Template: a, RequestID: "r1"}, {Template: a, RequestID: "r2"}, {Template: "counter", RequestID: "r1"}} {
		id := WarmingActorID(r)
		if !valid.MatchString(id) || FleetActorID(id) || !strings.HasPrefix(id, "warm_") {
			t.Errorf("%+v: warming actor %q", r, id)
		}
		if other, taken := ids[id]; taken {
			t.Errorf("%+v and %+v: one warming actor %q", r, other, id)
		}
		ids[id] = r
		if again := WarmingActorID(r); again != id {
			t.Errorf("%+v: %q, then %q", r, id, again)
		}
	}
	if id := WarmingActorID(WarmRequest{Template: "counter"}); id != "warm_counter" {
		t.Errorf("a short name's warming actor: %q, want warm_counter", id)
	}
}

// TestStoredActor: the actor a stored name says pushed it is all before
// the last dot, and only for the names stasisd gives actors' snapshots.
func TestStoredActor(t *testing.T) {
	for _, c := range []struct{ name, actor string }{
		{StoredName("d", "snap-5900d77a73d5"), "d"},
		{StoredName("d.x", "snap-5900d77a73d5"), "d.x"},
		{"golden.counter.golden-counter-5900d77a73d5", ""},
		{"golden.d.snap-5900d77a73d5x", ""},
		{"d.snap-5900D77A73D5", ""},
		{".snap-5900d77a73d5", ""},
		{"snap-5900d77a73d5", ""},
		{"by-hand", ""},
	} {
		actor, ok := StoredActor(c.name)
		if actor != c.actor || ok != (c.actor != "") {
			t.Errorf("%q: actor %q %v, want %q", c.name, actor, ok, c.actor)
		}
	}
}

// TestParsePort: docker run -p's forms, and refusals that say why.
func TestParsePort(t *testing.T) {
	for in, want := range map[string]Port{
		"8080:8000":           {HostPort: 8080, ContainerPort: 8000},
		"127.0.0.1:8080:8000": {HostIP: "127.0.0.1", HostPort: 8080, ContainerPort: 8000},
		"[::1]:8080:8000/tcp": {HostIP: "::1", HostPort: 8080, ContainerPort: 8000},
		"8000":                {ContainerPort: 8000},
		"0:8000":              {ContainerPort: 8000},
		"127.0.0.1::8000":     {HostIP: "127.0.0.1", ContainerPort: 8000},
	} {
		if got, err := ParsePort(in); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"8000/udp", "x:8000", "8080:70000", "8080:0", "-1:8000", "nohost:1:2"} {
		if p, err := ParsePort(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, p)
		}
	}
}

func TestParseMount(t *testing.T) {
	for in, want := range map[string]Mount{
		"/a:/b":    {Source: "/a", Target: "/b"},
		"/a:/b:ro": {Source: "/a", Target: "/b"},
		"/a:/b:rw": {Source: "/a", Target: "/b", ReadWrite: true},
	} {
		if got, err := ParseMount(in); err != nil || got != want {
			t.Errorf("%s: %+v %v", in, got, err)
		}
	}
	for _, in := range []string{"/a", ":/b", "/a:", "/a:/b:rx", "/a:/b:ro:x"} {
		if _, err := ParseMount(in); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", in, err)
		}
	}
}
