// Package lockfile takes advisory locks (flock) on files, held until the
// lock is released or the process ends, however it ends: stasisd holds its
// data folder and its runsc state folder this way for its whole life, so
// that a second daemon, or a daemon-less command, cannot act on actors the
// first one is driving.
package lockfile

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/errdefs"
)

// ErrLocked is returned (wrapped) when another process holds the lock.
var ErrLocked = errdefs.New(errdefs.ErrBusy, "locked")

// HeldError says who holds a lock that could not be taken.
type HeldError struct {
	Path string
	// Holder is what the exclusive holder wrote into the file, or
	// "another process".
	Holder string
}

func (e *HeldError) Error() string { return e.Path + " is held by " + e.Holder }

func (e *HeldError) Unwrap() error { return ErrLocked }

// Lock is a held lock.
type Lock struct{ f *os.File }

// Acquire takes the lock on path, creating the file (0600) if needed,
// without waiting: exclusive for an owner that must be alone, shared for
// one that only needs no exclusive owner. An exclusive owner writes its
// description (holder) into the file, so that a refused process can say
// who holds it.
func Acquire(path string, exclusive bool, holder string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		who, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			held := &HeldError{Path: path, Holder: strings.TrimSpace(string(who))}
			if held.Holder == "" {
				held.Holder = "another process"
			}
			return nil, held
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if exclusive {
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(holder+"\n"), 0)
		}
	}
	return &Lock{f: f}, nil
}

// Holder describes this process for an exclusive lock: its name and pid.
func Holder(name string) string { return name + " (pid " + strconv.Itoa(os.Getpid()) + ")" }

// Release gives the lock up.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
