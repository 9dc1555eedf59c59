package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
)

// Container ids in runsc. runsc finds a container by the beginning of its
// id (runsc/container's findContainerID): an id that begins no other
// names its container; one that begins another's and names none is taken
// for that other (a suspend of a1 would checkpoint and stop a1.b), and a
// restore into it finds that other (and fails); one that names a
// container and begins another's is refused as ambiguous, whatever the
// command. So no container is made whose id begins another's, or that
// another's begins (CheckNewID), and a command for an id that names no
// container is never given to runsc where it would be taken for another
// (prefixTaken). stasisd's ids (+ID+, api.SandboxID) never begin one
// another.

// containers are the containers in runsc's state folder (--root), where
// runsc keeps each one's state as ID_sandbox:SANDBOX.state, by id, each
// with that file's path; none where the folder cannot be read.
func (r *Runsc) containers() map[string]string {
	entries, err := os.ReadDir(r.cfg.Root)
	if err != nil {
		return nil
	}
	ids := map[string]string{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".state")
		if !ok {
			continue
		}
		// A container id holds no ':' (runsc takes [A-Za-z0-9_+.-]).
		if id, _, ok := strings.Cut(name, "_sandbox:"); ok {
			ids[id] = filepath.Join(r.cfg.Root, e.Name())
		}
	}
	return ids
}

// prefixTaken refuses a command for container id where no container has
// that id but another's begins with it, which runsc would run the
// command on. The error is a runtime.ErrNotFound: there is no container
// id.
func (r *Runsc) prefixTaken(id string) error {
	all := r.containers()
	if _, ok := all[id]; ok {
		return nil
	}
	for other := range all {
		if strings.HasPrefix(other, id) {
			return fmt.Errorf("%w: no container %s is here, and runsc would take container %s for it (it finds containers by the beginning of their ids)", runtime.ErrNotFound, id, other)
		}
	}
	return nil
}

// CheckNewID refuses id for a new container where it begins another
// container's id or another's begins it: runsc could then address
// neither of the two (create and restore check it too).
func (r *Runsc) CheckNewID(id string) error {
	for other := range r.containers() {
		if other != id && (strings.HasPrefix(other, id) || strings.HasPrefix(id, other)) {
			return errdefs.Mark(fmt.Errorf("container id %s cannot be used beside container %s: runsc finds containers by the beginning of their ids and could not tell the two apart; choose an id that begins no other container's id and that no other's begins", id, other), errdefs.ErrFailedPrecondition)
		}
	}
	return nil
}
