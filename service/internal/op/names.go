package op

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/stasis-run/stasis/errdefs"
)

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// CheckName refuses a name of a template or an actor (what) that is not
// 1-63 lowercase letters, digits, '.', '_' or '-'.
func CheckName(what, name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w: %s name %q: use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", errdefs.ErrInvalidArgument, what, name)
	}
	return nil
}

// NewID is a new random id with prefix: an operation's, a snapshot's.
func NewID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
