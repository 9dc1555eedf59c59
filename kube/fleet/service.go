package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// ActorLabel, on an actor's Service and EndpointSlice, names the actor.
const ActorLabel = "stasis.dev/actor"

// serviceName is what a Service may be named: a DNS label (RFC 1035) that
// starts with a letter.
var serviceName = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ServiceName names the Service (and the EndpointSlice) of the actor name:
// the name itself where a Service may have it, else one made of it (dots
// as dashes, a- before a leading digit, cut to length) and a hash of the
// whole name, so that two actors whose names differ only past the cut, or
// in a dot, get Services of their own.
func ServiceName(actor string) string {
	if serviceName.MatchString(actor) {
		return actor
	}
	sum := sha256.Sum256([]byte(actor))
	base := strings.ReplaceAll(actor, ".", "-")
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		base = "a-" + base
	}
	const hashLen = 10
	base = strings.TrimRight(base[:min(len(base), 63-1-hashLen)], "-")
	return base + "-" + hex.EncodeToString(sum[:])[:hashLen]
}
