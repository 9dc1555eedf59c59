// Package journal is stasisd's durable record of templates, actors,
// snapshots and operations, in one SQLite file. Every step of an operation
// is written before the step starts, so that after a crash the service
// knows exactly where each interrupted operation stood and can finish it or
// roll it back (service.Reconcile).
package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// schemaVersion is the journal format this package writes and reads.
const schemaVersion = 1

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

// Journal is an open journal file. It is safe for concurrent use.
type Journal struct {
	db *sql.DB
}

// ErrNotFound is returned (wrapped) for a record that does not exist.
var ErrNotFound = errors.New("not found")

// ErrBusy is returned by Begin when the actor already has a running
// operation; the error names it.
var ErrBusy = errors.New("busy")

// Open opens or creates the journal at path. A journal written by another
// schema version is refused.
func Open(ctx context.Context, path string) (*Journal, error) {
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
	j := &Journal{db: db}
	if err := j.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	return j, nil
}

func (j *Journal) migrate(ctx context.Context) error {
	if _, err := j.db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create schema (is this a SQLite file?): %w", err)
	}
	var v string
	err := j.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'schema'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		_, err = j.db.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES ('schema', ?)`, fmt.Sprint(schemaVersion))
		return err
	}
	if err != nil {
		return err
	}
	if v != fmt.Sprint(schemaVersion) {
		return fmt.Errorf("journal schema version %s, this stasisd reads version %d (use the stasisd that wrote it)", v, schemaVersion)
	}
	return nil
}

// Close closes the file.
func (j *Journal) Close() error { return j.db.Close() }

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}

// ErrExists is returned (wrapped) when creating a record whose name is
// taken.
var ErrExists = errors.New("already exists")

// tx runs fn in one transaction.
func (j *Journal) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func notFound(err error, what, id string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	}
	return err
}
