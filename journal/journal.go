// Package journal is stasisd's durable record of templates, actors,
// snapshots and operations, in one SQLite file. Every step of an operation
// is written before the step starts, so that after a crash the service
// knows exactly where each interrupted operation stood and can finish it or
// roll it back (service.Reconcile).
//
// The journal keeps a reserve of disk space beside its file. When a write
// that settles an operation (its end, the records of what it made or
// removed) finds the disk full, the reserve is given up and the write tried
// again, so that an actor is never left in a transitional state because its
// disk filled up. Writes that start something (an operation, a step) do
// not get the reserve: on a full disk they fail, with
// errdefs.ErrResourceExhausted, and what they would have started does not
// start.
package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/stasis-run/stasis/errdefs"
)

// schemaVersion is the journal format this package writes and reads.
// Older journals (1: no error codes, no deadlines; 2: no fleet lease; 3:
// no actor runtimes, every actor gVisor's; 4: no record of which stored
// snapshots an actor pushed itself) are upgraded on open; a stasisd
// that knows no fleet lease refuses a journal that may hold one, as it
// would not fence, and one that knows no runtimes a journal that may hold
// micro-VM actors. Version 6 added each actor's network, 7 whether its
// idle policy paused or suspended it and how its process exited.
const schemaVersion = 7

const schema = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS templates (
	name TEXT PRIMARY KEY,
	spec TEXT NOT NULL,
	golden TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS actors (
	id TEXT PRIMARY KEY,
	template TEXT NOT NULL,
	state TEXT NOT NULL,
	reason TEXT NOT NULL DEFAULT '',
	sandbox TEXT NOT NULL,
	snapshot TEXT NOT NULL DEFAULT '',
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshots (
	id TEXT PRIMARY KEY,
	actor TEXT NOT NULL,
	template TEXT NOT NULL,
	kind TEXT NOT NULL,
	scope TEXT NOT NULL,
	dir TEXT NOT NULL DEFAULT '',
	stored TEXT NOT NULL DEFAULT '',
	size INTEGER NOT NULL DEFAULT 0,
	created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS operations (
	id TEXT PRIMARY KEY,
	actor TEXT NOT NULL,
	kind TEXT NOT NULL,
	request_id TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL,
	step TEXT NOT NULL DEFAULT '',
	args TEXT NOT NULL DEFAULT '{}',
	error TEXT NOT NULL DEFAULT '',
	started_at TEXT NOT NULL,
	ended_at TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS one_running_operation ON operations(actor) WHERE state = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS request_ids ON operations(actor, kind, request_id) WHERE request_id != '';
CREATE TABLE IF NOT EXISTS events (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	actor TEXT NOT NULL,
	operation TEXT NOT NULL DEFAULT '',
	step TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	error TEXT NOT NULL DEFAULT '',
	duration_ns INTEGER NOT NULL DEFAULT 0,
	at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_actor ON events(actor, seq);
`

// upgrades take a journal from version N-1 to N (index N-2).
var upgrades = []string{
	`ALTER TABLE operations ADD COLUMN error_code TEXT NOT NULL DEFAULT '';
	 ALTER TABLE operations ADD COLUMN deadline TEXT NOT NULL DEFAULT '';`,
	`CREATE TABLE lease (
		id INTEGER PRIMARY KEY CHECK (id = 1),
		holder TEXT NOT NULL,
		until_ns INTEGER NOT NULL,
		bound TEXT NOT NULL,
		renewed_at TEXT NOT NULL
	);`,
	`ALTER TABLE actors ADD COLUMN runtime TEXT NOT NULL DEFAULT 'gvisor';`,
	// Before version 5 stasisd named what an actor pushed ACTOR.SNAPSHOT,
	// and a golden snapshot golden.TEMPLATE.SNAPSHOT, with the record's own
	// id: the records whose stored name is exactly that were pushed by
	// their actor; every other stored name is a snapshot it started from.
	`ALTER TABLE snapshots ADD COLUMN pushed INTEGER NOT NULL DEFAULT 0;
	 UPDATE snapshots SET pushed = 1 WHERE stored != '' AND (stored = actor || '.' || id OR stored = 'golden.' || template || '.' || id);`,
	`ALTER TABLE actors ADD COLUMN network TEXT NOT NULL DEFAULT '';`,
	`ALTER TABLE actors ADD COLUMN idle INTEGER NOT NULL DEFAULT 0;
	 ALTER TABLE actors ADD COLUMN exit_code INTEGER NOT NULL DEFAULT 0;
	 ALTER TABLE actors ADD COLUMN exited_at TEXT NOT NULL DEFAULT '';`,
}

// DefaultReserve is the disk space kept beside the journal for the writes
// that end operations when the disk is full. An operation's end is a few
// KiB; the rest is room for SQLite's write-ahead log to grow.
const DefaultReserve = 16 << 20

// Journal is an open journal file. It is safe for concurrent use.
type Journal struct {
	db *sql.DB

	reservePath string
	reserveSize int64
	// reserveMu guards reserved, which says whether the reserve file is
	// in place.
	reserveMu sync.Mutex
	reserved  bool
}

// ErrNotFound is returned (wrapped) for a record that does not exist.
var ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found")

// ErrBusy is returned by Begin when the actor already has a running
// operation; the error names it.
var ErrBusy = errdefs.New(errdefs.ErrBusy, "busy")

// ErrExists is returned (wrapped) when creating a record whose name is
// taken.
var ErrExists = errdefs.New(errdefs.ErrAlreadyExists, "already exists")

// Options tune Open.
type Options struct {
	// Reserve is the disk space kept for the writes that end operations;
	// DefaultReserve when zero, none when negative.
	Reserve int64
}

// Open opens or creates the journal at path, readable by its owner only.
// A journal written by a newer schema version is refused; an older one is
// upgraded.
func Open(ctx context.Context, path string, opts Options) (*Journal, error) {
	// SQLite gives its -wal and -shm files the database file's mode, so
	// creating the file 0600 first keeps all three private whatever the
	// umask.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	chmodErr := f.Chmod(0o600)
	f.Close()
	if chmodErr != nil {
		return nil, fmt.Errorf("journal %s: %w", path, chmodErr)
	}
	for _, side := range []string{"-wal", "-shm"} {
		if err := os.Chmod(path+side, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("journal %s: %w", path+side, err)
		}
	}
	// WAL lets readers (ps, events) run beside a writer; synchronous=FULL
	// makes every committed step survive a power cut, which is the point
	// of the journal. One connection serialises writers without
	// SQLITE_BUSY.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	j := &Journal{db: db, reservePath: path + ".reserve", reserveSize: opts.Reserve}
	if j.reserveSize == 0 {
		j.reserveSize = DefaultReserve
	}
	if err := j.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j.keepReserve()
	return j, nil
}

func (j *Journal) migrate(ctx context.Context) error {
	if _, err := j.db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create schema (is this a SQLite file?): %w", err)
	}
	var v int
	err := j.db.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		// A new journal: the schema above plus every upgrade.
		v = 1
		if _, err := j.db.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES ('schema', '1')`); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if v > schemaVersion || v < 1 {
		return fmt.Errorf("journal schema version %d, this stasisd reads versions 1 to %d (use the stasisd that wrote it)", v, schemaVersion)
	}
	for ; v < schemaVersion; v++ {
		err := j.tx(ctx, settles, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, upgrades[v-1]); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'schema'`, fmt.Sprint(v+1))
			return err
		})
		if err != nil {
			return fmt.Errorf("upgrade the journal from schema version %d: %w", v, err)
		}
	}
	return nil
}

// Close closes the file.
func (j *Journal) Close() error { return j.db.Close() }

func now() string { return formatTime(time.Now()) }

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// optionalTime is t as a column stores it, "" for none.
func optionalTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return formatTime(t)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// reserve says whether a write may give the disk reserve up.
type reserve bool

const (
	// settles: the write ends or records the outcome of an operation and
	// must get through.
	settles reserve = true
	// starts: the write begins something that, on a full disk, had better
	// not begin.
	starts reserve = false
)

// write runs fn, a write to the database. When the disk is full and the
// write settles an operation, the reserve is given up and fn runs once
// more. A full disk is reported as errdefs.ErrResourceExhausted.
func (j *Journal) write(r reserve, fn func() error) error {
	err := fn()
	if diskFull(err) && r == settles && j.releaseReserve() {
		err = fn()
	}
	if err == nil {
		j.keepReserve()
	}
	if diskFull(err) {
		return errdefs.Mark(fmt.Errorf("the disk holding the journal is full: %w", err), errdefs.ErrResourceExhausted)
	}
	return err
}

// tx runs fn in one transaction, as a write.
func (j *Journal) tx(ctx context.Context, r reserve, fn func(*sql.Tx) error) error {
	return j.write(r, func() error {
		tx, err := j.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// exec runs one statement as a write.
func (j *Journal) exec(ctx context.Context, r reserve, query string, args ...any) (sql.Result, error) {
	var res sql.Result
	err := j.write(r, func() error {
		var err error
		res, err = j.db.ExecContext(ctx, query, args...)
		return err
	})
	return res, err
}

// diskFull tells SQLITE_FULL (and ENOSPC) from other failures.
func diskFull(err error) bool {
	if err == nil {
		return false
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) && coded.Code()&0xff == 13 {
		return true
	}
	return errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "database or disk is full")
}

// releaseReserve removes the reserve file; it says whether there was one
// to remove.
func (j *Journal) releaseReserve() bool {
	j.reserveMu.Lock()
	defer j.reserveMu.Unlock()
	if !j.reserved {
		return false
	}
	j.reserved = false
	return os.Remove(j.reservePath) == nil
}

// keepReserve puts the reserve file in place when it is missing and the
// disk has room for it and as much again.
func (j *Journal) keepReserve() {
	if j.reserveSize <= 0 {
		return
	}
	j.reserveMu.Lock()
	defer j.reserveMu.Unlock()
	if j.reserved {
		return
	}
	if st, err := os.Stat(j.reservePath); err == nil && st.Size() >= j.reserveSize {
		j.reserved = true
		return
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(j.reservePath), &fs); err != nil || int64(fs.Bavail)*fs.Bsize < 2*j.reserveSize {
		return
	}
	f, err := os.OpenFile(j.reservePath, os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	// fallocate takes the blocks without writing them; a filesystem
	// without it gets zeros.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, j.reserveSize); err != nil {
		if _, err := f.WriteAt(make([]byte, j.reserveSize), 0); err != nil {
			_ = os.Remove(j.reservePath)
			return
		}
	}
	if f.Sync() == nil {
		j.reserved = true
	}
}

// Reserved tells whether the journal's disk reserve is in place.
func (j *Journal) Reserved() bool {
	j.reserveMu.Lock()
	defer j.reserveMu.Unlock()
	return j.reserved
}

func notFound(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	}
	return err
}
