package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/stasis-run/stasis/errdefs"
)

// Lease is this node's fleet lease: the right to run the actors bound to
// the node, held by a fleet agent that renews it (service's fencing). There
// is at most one.
type Lease struct {
	Holder string
	// Until is when it lapses unless renewed, on the wall clock, so that a
	// restarted stasisd knows whether it has.
	Until time.Time
	// Bound are the actors the holder said were bound to this node when
	// it last renewed.
	Bound     []string
	RenewedAt time.Time
	// Epoch is the newest fencing epoch a renewal showed this node. It
	// is kept (in meta) across restarts, and given up with the lease.
	Epoch int64
}

// epochKey is the newest fencing epoch's key in meta.
const epochKey = "fleet_epoch"

// Lease reads the fleet lease; ok is false when none is held.
func (j *Journal) Lease(ctx context.Context) (l Lease, ok bool, err error) {
	var until int64
	var bound, renewed string
	err = j.db.QueryRowContext(ctx, `SELECT holder, until_ns, bound, renewed_at FROM lease WHERE id = 1`).Scan(&l.Holder, &until, &bound, &renewed)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, err
	}
	if err := json.Unmarshal([]byte(bound), &l.Bound); err != nil {
		return Lease{}, false, err
	}
	l.Until, l.RenewedAt = time.Unix(0, until), parseTime(renewed)
	if l.Epoch, err = fleetEpoch(ctx, j.db); err != nil {
		return Lease{}, false, err
	}
	return l, true, nil
}

// queryer is a database or a transaction.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// fleetEpoch is the newest fencing epoch recorded, 0 for none.
func fleetEpoch(ctx context.Context, q queryer) (int64, error) {
	var v string
	err := q.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, epochKey).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	epoch, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the fleet epoch recorded, %q: %w", v, err)
	}
	return epoch, nil
}

// PutLease takes or renews the fleet lease, and records its epoch as the
// newest: a renewal of an epoch older than the one recorded is refused
// (errdefs.ErrFailedPrecondition) and changes nothing.
func (j *Journal) PutLease(ctx context.Context, l Lease) error {
	bound, err := json.Marshal(l.Bound)
	if err != nil {
		return err
	}
	return j.tx(ctx, starts, func(tx *sql.Tx) error {
		newest, err := fleetEpoch(ctx, tx)
		if err != nil {
			return err
		}
		if l.Epoch < newest {
			return fmt.Errorf("%w: a renewal of fencing epoch %d, after epoch %d was shown: the fleet has since moved this node's actors, and this renewal renews and thaws nothing (is an older agent of this node still running? if the node's Lease was made anew, `stasis node lease release` gives the old epoch up)",
				errdefs.ErrFailedPrecondition, l.Epoch, newest)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO lease(id, holder, until_ns, bound, renewed_at) VALUES (1, ?, ?, ?, ?)
			ON CONFLICT(id) DO UPDATE SET holder = excluded.holder, until_ns = excluded.until_ns, bound = excluded.bound, renewed_at = excluded.renewed_at`,
			l.Holder, l.Until.UnixNano(), string(bound), now()); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value`, epochKey, strconv.FormatInt(l.Epoch, 10))
		return err
	})
}

// DeleteLease gives the fleet lease up, and its epoch with it.
func (j *Journal) DeleteLease(ctx context.Context) error {
	return j.tx(ctx, settles, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM lease WHERE id = 1`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM meta WHERE key = ?`, epochKey)
		return err
	})
}
