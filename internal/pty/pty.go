// Package pty opens Linux pseudo-terminals and sets their window size.
package pty

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Open opens a new pseudo-terminal: its master end, which the caller
// reads and writes, and its replica, the terminal a process is given.
// Both are close-on-exec; the master end is read through Go's poller, so
// closing it or a read deadline ends a read in progress.
func Open() (master, replica *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	var n uint32
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlock it: %w", err)
		}
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	})
	if err == nil {
		replica, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	return master, replica, nil
}

// SetSize sets the window size of the terminal f is an end of; the
// terminal's foreground process group gets SIGWINCH.
func SetSize(f *os.File, rows, cols uint16) error {
	return control(f, func(fd int) error {
		if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			return fmt.Errorf("set the terminal's size to %dx%d: %w", cols, rows, err)
		}
		return nil
	})
}

// Size is the window size of the terminal f is an end of.
func Size(f *os.File) (rows, cols uint16, err error) {
	err = control(f, func(fd int) error {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err == nil {
			rows, cols = ws.Row, ws.Col
		}
		return err
	})
	return rows, cols, err
}

// control runs fn on f's descriptor without taking it out of the poller
// (as f.Fd() would).
func control(f *os.File, fn func(fd int) error) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
