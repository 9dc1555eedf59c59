package journal

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"
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
}

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
	return l, true, nil
}

// PutLease takes or renews the fleet lease.
func (j *Journal) PutLease(ctx context.Context, l Lease) error {
	bound, err := json.Marshal(l.Bound)
	if err != nil {
		return err
	}
	_, err = j.exec(ctx, starts, `INSERT INTO lease(id, holder, until_ns, bound, renewed_at) VALUES (1, ?, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET holder = excluded.holder, until_ns = excluded.until_ns, bound = excluded.bound, renewed_at = excluded.renewed_at`,
		l.Holder, l.Until.UnixNano(), string(bound), now())
	return err
}

// DeleteLease gives the fleet lease up.
func (j *Journal) DeleteLease(ctx context.Context) error {
	_, err := j.exec(ctx, settles, `DELETE FROM lease WHERE id = 1`)
	return err
}
