// Package runscid says which strings runsc takes as container ids. The
// files Stasis keeps in runsc's state folder for a sandbox (its pause lock,
// the bundle of its restore) are named after its id, so an id must be one
// runsc takes before any path is built from it.
package runscid

import "regexp"

// Valid says whether id is what runsc takes as a container id, and so
// names a file or folder of its own in a folder of runsc's: letters,
// digits, _ + . -, neither . nor .., no slash.
func Valid(id string) bool {
	return containerID.MatchString(id) && id != "." && id != ".."
}

var containerID = regexp.MustCompile(`^[\w+.-]+$`)
