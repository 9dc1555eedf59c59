// Package fencefile is the hand-over between stasisd and its fence
// watchdog (stasisd watchdog): when this node's fleet lease lapses, on the
// CLOCK_BOOTTIME clock, and the commands that freeze the sandboxes of the
// fleet actors that may run. CLOCK_BOOTTIME is monotonic, the same for
// every process of the machine and unmoved by the wall clock, so that the
// watchdog, another process, reads the deadline as stasisd meant it.
package fencefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/pauselock"
)

// File is what stasisd hands over.
type File struct {
	// Holder is the lease's holder, for the logs.
	Holder string `json:"holder"`
	// Until is when the watchdog fences, in CLOCK_BOOTTIME nanoseconds
	// (Now): a little after the lease lapses, so that a stasisd that runs
	// fences first.
	Until int64 `json:"untilBoottimeNs"`
	// Commands freeze the sandboxes of the fleet actors that may run.
	Commands [][]string `json:"commands"`
}

// Path is the file's place in a data folder; LockPath the watchdog's lock.
func Path(dataDir string) string     { return filepath.Join(dataDir, "fence", "lease.json") }
func LockPath(dataDir string) string { return filepath.Join(dataDir, "fence", "watchdog.lock") }

// Now is CLOCK_BOOTTIME in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_BOOTTIME): %v", err)) // in every Linux since 2.6.39
	}
	return ts.Nano()
}

// Encode is f as written.
func (f File) Encode() ([]byte, error) { return json.Marshal(f) }

// Write replaces the file at path with data (Encode), atomically.
func Write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return fsutil.WriteAtomic(path, bytes.NewReader(data), int64(len(data)))
}

// Read reads the file at path; false when there is none.
func Read(path string) (File, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return File{}, false, nil
	}
	if err != nil {
		return File{}, false, err
	}
	var f File
	if err := json.Unmarshal(data, &f); err != nil {
		return File{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return f, true, nil
}

// Remove removes the file at path: no lease, nothing to guard.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Run runs the fence commands at once, each for up to 10 s, and logs
// those that fail (a sandbox already frozen, or gone, is no news). A runsc
// pause runs under the sandbox's pause lock (package pauselock), so that
// it never pauses a sandbox another party pauses at the same moment; a
// lock not had within lockWait (its holder hung mid-way: its own runsc has
// ended) is gone past, as the fence must land.
func Run(ctx context.Context, cmds [][]string, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, argv := range cmds {
		if len(argv) == 0 {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if root, id, ok := pauselock.Of(argv); ok {
				lctx, cancel := context.WithTimeout(cctx, lockWait)
				release, err := pauselock.Hold(lctx, root, id)
				cancel()
				if err != nil {
					log.Warn("a fence command runs without its pause lock", "command", strings.Join(argv, " "), "err", err)
				} else {
					defer release()
				}
			}
			if out, err := exec.CommandContext(cctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
				log.Warn("a fence command failed", "command", strings.Join(argv, " "), "err", err, "output", strings.TrimSpace(string(out)))
			}
		})
	}
	wg.Wait()
}

// lockWait bounds the wait for a sandbox's pause lock: a pause or resume
// takes well under a second; one held longer is held by a process that
// hung or stopped after its runsc ended.
const lockWait = 5 * time.Second
