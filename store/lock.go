package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/tick"
)

// Locking keeps garbage collection away from writers. A writer (a save,
// Delete) holds a shared lock, GC an exclusive one. Each takes its lock by
// writing locks/<id>, then lists locks/: a writer that sees an exclusive
// lock, or GC that sees any other lock, removes its own and fails. Since
// both write before they list, two that race see each other and at least one
// gives way. Holders refresh their lock's time; a lock not refreshed for
// staleLockAge is from a dead process and is ignored (and removed by GC).
const (
	staleLockAge   = 30 * time.Minute
	lockRefreshGap = 5 * time.Minute
)

type lockFile struct {
	Exclusive bool      `json:"exclusive"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Time      time.Time `json:"time"`
}

// ErrLocked means another process holds a conflicting lock: busy, retry
// when it is done (the CLI exits 6).
var ErrLocked = errdefs.New(errdefs.ErrBusy, "repository is locked")

// Lock takes the repository's lock: shared for a writer of snapshots,
// exclusive for GC. It fails with ErrLocked when a conflicting lock is
// held; unlock releases it.
func (r *Repository) Lock(ctx context.Context, exclusive bool) (unlock func(), err error) {
	host, _ := os.Hostname()
	key := locksPrefix + newID()
	lf := lockFile{Exclusive: exclusive, Host: host, PID: os.Getpid(), Time: time.Now().UTC()}
	if err := putJSON(ctx, r.be, key, lf); err != nil {
		return nil, err
	}
	release := func() { _ = r.be.Delete(context.WithoutCancel(ctx), key) }
	var conflicts []string
	err = r.be.List(ctx, locksPrefix, func(other string, _ int64) error {
		if other == key {
			return nil
		}
		var o lockFile
		if err := getJSON(ctx, r.be, other, &o); err != nil {
			if errors.Is(err, ErrNotExist) {
				return nil // released meanwhile
			}
			return err
		}
		if time.Since(o.Time) > staleLockAge {
			return nil
		}
		if exclusive || o.Exclusive {
			kind := "shared"
			if o.Exclusive {
				kind = "exclusive"
			}
			conflicts = append(conflicts, fmt.Sprintf("%s lock of pid %d on %s, %s old", kind, o.PID, o.Host, time.Since(o.Time).Round(time.Second)))
		}
		return nil
	})
	if err == nil && len(conflicts) > 0 {
		err = fmt.Errorf("%w: %s", ErrLocked, strings.Join(conflicts, "; "))
	}
	if err != nil {
		release()
		return nil, fmt.Errorf("store %s: %w", r.be.Location(), err)
	}
	refresh := tick.Every(context.WithoutCancel(ctx), lockRefreshGap, func() {
		lf.Time = time.Now().UTC()
		_ = putJSON(context.WithoutCancel(ctx), r.be, key, lf)
	})
	return func() {
		// A refresh still writing after the release would make the lock
		// again: it ends first.
		refresh()
		release()
	}, nil
}
