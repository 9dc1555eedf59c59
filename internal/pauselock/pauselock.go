// Package pauselock serializes the pauses and resumes of one runsc sandbox
// across the processes that freeze it: stasisd, its fence watchdog and the
// fleet agent. runsc counts pauses: two `runsc pause` of one sandbox at once
// both find it running and both pause its kernel, and the one `runsc
// resume` that follows (runsc then says it runs, and refuses another)
// leaves it frozen for good while runsc reports it running; its processes
// never run again and every exec into it hangs. Seen with the fleet at
// scale: the agent's fence and stasisd's raced when a loaded node's lease
// lapsed. Held, the lock makes the second pause find the sandbox paused,
// which runsc refuses.
package pauselock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/runscid"
)

// dir is where the locks are, inside runsc's state folder (--root), which
// every party that pauses a sandbox reaches (the agent mounts it).
const dir = "stasis-pause-locks"

// Path is the lock of sandbox id in runsc's state folder root.
func Path(root, id string) (string, error) {
	if !runscid.Valid(id) {
		return "", fmt.Errorf("pause lock: %q is not a runsc container id", id)
	}
	return filepath.Join(root, dir, id+".lock"), nil
}

// Hold takes sandbox id's lock, waiting for another holder until ctx
// ends, and returns its release.
func Hold(ctx context.Context, root, id string) (release func(), err error) {
	path, err := Path(root, id)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("pause lock: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pause lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("pause lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("pause lock %s: another process holds it: %w", path, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Of says which sandbox a fence command pauses, and in which runsc state
// folder, when it is a runsc pause ("RUNSC [FLAGS] pause ID" with --root
// among the flags): the lock it must run under.
func Of(argv []string) (root, id string, ok bool) {
	if len(argv) < 3 || argv[len(argv)-2] != "pause" {
		return "", "", false
	}
	for i, a := range argv[1 : len(argv)-2] {
		switch {
		case a == "--root" || a == "-root":
			if i+2 < len(argv)-2 {
				root = argv[i+2]
			}
		case strings.HasPrefix(a, "--root="):
			root = strings.TrimPrefix(a, "--root=")
		case strings.HasPrefix(a, "-root="):
			root = strings.TrimPrefix(a, "-root=")
		}
	}
	return root, argv[len(argv)-1], root != ""
}
