package journal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stasis-run/stasis/errdefs"
)

// Template is a recipe for actors; Spec is the service's own JSON.
type Template struct {
	Name string
	Spec []byte
	// Golden is the id of the template's golden snapshot, when warmed.
	Golden    string
	CreatedAt time.Time
}

// Actor is one actor and where it stands.
type Actor struct {
	ID       string
	Template string
	// Runtime is the runtime the actor's sandboxes run in (its template's
	// when it was made); "gvisor" when made empty.
	Runtime string
	State   string
	// Reason says why the actor is in its state (CRASHED, a cold boot).
	Reason string
	// Sandbox is the runtime's container id.
	Sandbox string
	// Snapshot is the id of the actor's latest good snapshot.
	Snapshot string
	// Network is the actor's network as the service records it (opaque
	// to the journal).
	Network string
	// Idle: the operation that left it PAUSED or SUSPENDED was its idle
	// policy's, not a caller's.
	Idle bool
	// ExitCode and ExitedAt: how and when its process ended, while the
	// operation that saw it is the last to have ended.
	ExitCode  int
	ExitedAt  time.Time
	CreatedAt time.Time
	UpdatedAt time.Time

	// Latest is the record of Snapshot and Running the operation in
	// flight, when there are; read with the actor in one query.
	Latest  *Snapshot
	Running *Operation
}

func (a Actor) runtime() string {
	if a.Runtime == "" {
		return "gvisor"
	}
	return a.Runtime
}

// Snapshot is one snapshot the service made.
type Snapshot struct {
	ID       string
	Actor    string
	Template string
	// Kind is pause (kept on this node), commit (in the store) or golden.
	Kind  string
	Scope string
	// Dir is the local folder ("" once removed); Stored the name in the
	// store ("" when not stored).
	Dir    string
	Stored string
	// Pushed says that this actor stored it (its suspend's or pause's
	// push, or its template's warming), rather than started from a
	// snapshot another stored: an actor's purge deletes only these.
	Pushed    bool
	Size      int64
	CreatedAt time.Time
}

// Operation is one operation on an actor.
type Operation struct {
	ID        string
	Actor     string
	Kind      string
	RequestID string
	// State is running, done or failed.
	State string
	Step  string
	Args  []byte
	// Error is a failed operation's error, and ErrorCode its category
	// (errdefs), so that a replayed request answers as the first did.
	Error     string
	ErrorCode string
	// Deadline is when a running operation is cut short.
	Deadline  time.Time
	StartedAt time.Time
	EndedAt   time.Time
}

// Event is one line of an actor's history.
type Event struct {
	Seq       int64
	Actor     string
	Operation string
	Step      string
	Message   string
	Error     string
	Duration  time.Duration
	At        time.Time
}

// Operation states.
const (
	OpRunning = "running"
	OpDone    = "done"
	OpFailed  = "failed"
)

type scanner interface{ Scan(...any) error }

func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// PutTemplate records a new template.
func (j *Journal) PutTemplate(ctx context.Context, t Template) error {
	_, err := j.exec(ctx, starts, `INSERT INTO templates(name, spec, golden, created_at) VALUES (?, ?, ?, ?)`, t.Name, string(t.Spec), t.Golden, now())
	if isUnique(err) {
		return fmt.Errorf("template %q: %w", t.Name, ErrExists)
	}
	return err
}

// SetGolden records the template's golden snapshot.
func (j *Journal) SetGolden(ctx context.Context, name, snapshot string) error {
	return j.update(ctx, settles, "template", name, `UPDATE templates SET golden = ? WHERE name = ?`, snapshot, name)
}

// DeleteTemplate forgets a template that no actor uses; it answers a
// failed precondition naming the actors that still do.
func (j *Journal) DeleteTemplate(ctx context.Context, name string) error {
	return j.tx(ctx, settles, func(tx *sql.Tx) error {
		users, err := list(ctx, tx, func(row scanner) (id string, err error) { return id, row.Scan(&id) }, `SELECT id FROM actors WHERE template = ? ORDER BY id`, name)
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return fmt.Errorf("%w: template %s is used by actor(s) %s; delete them first", errdefs.ErrFailedPrecondition, name, strings.Join(users, ", "))
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM templates WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("template %q: %w", name, ErrNotFound)
		}
		return nil
	})
}

func (j *Journal) update(ctx context.Context, r reserve, what, id, query string, args ...any) error {
	res, err := j.exec(ctx, r, query, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %q: %w", what, id, ErrNotFound)
	}
	return nil
}

const templateCols = `name, spec, golden, created_at`

func scanTemplate(row scanner) (Template, error) {
	var t Template
	var spec, created string
	err := row.Scan(&t.Name, &spec, &t.Golden, &created)
	t.Spec, t.CreatedAt = []byte(spec), parseTime(created)
	return t, err
}

// Template reads one template.
func (j *Journal) Template(ctx context.Context, name string) (Template, error) {
	t, err := scanTemplate(j.db.QueryRowContext(ctx, `SELECT `+templateCols+` FROM templates WHERE name = ?`, name))
	return t, notFound(err, "template", name)
}

// Templates lists every template by name.
func (j *Journal) Templates(ctx context.Context) ([]Template, error) {
	return list(ctx, j.db, scanTemplate, `SELECT `+templateCols+` FROM templates ORDER BY name`)
}

func list[T any](ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

const actorCols = `id, template, runtime, state, reason, sandbox, snapshot, network, idle, exit_code, exited_at, created_at, updated_at`

func scanActor(row scanner) (Actor, error) {
	var a Actor
	var exited, created, updated string
	err := row.Scan(&a.ID, &a.Template, &a.Runtime, &a.State, &a.Reason, &a.Sandbox, &a.Snapshot, &a.Network, &a.Idle, &a.ExitCode, &exited, &created, &updated)
	a.ExitedAt, a.CreatedAt, a.UpdatedAt = parseTime(exited), parseTime(created), parseTime(updated)
	return a, err
}

// actorView reads an actor with its latest snapshot and its running
// operation in one query.
const actorView = `SELECT a.id, a.template, a.runtime, a.state, a.reason, a.sandbox, a.snapshot, a.network, a.idle, a.exit_code, a.exited_at, a.created_at, a.updated_at,
	s.id, s.actor, s.template, s.kind, s.scope, s.dir, s.stored, s.pushed, s.size, s.created_at,
	o.id, o.actor, o.kind, o.request_id, o.state, o.step, o.args, o.error, o.error_code, o.deadline, o.started_at, o.ended_at
	FROM actors a
	LEFT JOIN snapshots s ON s.id = a.snapshot AND a.snapshot != ''
	LEFT JOIN operations o ON o.actor = a.id AND o.state = 'running'`

func scanActorView(row scanner) (Actor, error) {
	var a Actor
	var exited, created, updated string
	var s struct {
		id, actor, template, kind, scope, dir, stored, created sql.NullString
		size                                                   sql.NullInt64
		pushed                                                 sql.NullBool
	}
	var o struct {
		id, actor, kind, requestID, state, step, args, err, code, deadline, started, ended sql.NullString
	}
	err := row.Scan(&a.ID, &a.Template, &a.Runtime, &a.State, &a.Reason, &a.Sandbox, &a.Snapshot, &a.Network, &a.Idle, &a.ExitCode, &exited, &created, &updated,
		&s.id, &s.actor, &s.template, &s.kind, &s.scope, &s.dir, &s.stored, &s.pushed, &s.size, &s.created,
		&o.id, &o.actor, &o.kind, &o.requestID, &o.state, &o.step, &o.args, &o.err, &o.code, &o.deadline, &o.started, &o.ended)
	if err != nil {
		return a, err
	}
	a.ExitedAt, a.CreatedAt, a.UpdatedAt = parseTime(exited), parseTime(created), parseTime(updated)
	if s.id.Valid {
		a.Latest = &Snapshot{ID: s.id.String, Actor: s.actor.String, Template: s.template.String, Kind: s.kind.String, Scope: s.scope.String,
			Dir: s.dir.String, Stored: s.stored.String, Pushed: s.pushed.Bool, Size: s.size.Int64, CreatedAt: parseTime(s.created.String)}
	}
	if o.id.Valid {
		a.Running = &Operation{ID: o.id.String, Actor: o.actor.String, Kind: o.kind.String, RequestID: o.requestID.String, State: o.state.String,
			Step: o.step.String, Args: []byte(o.args.String), Error: o.err.String, ErrorCode: o.code.String,
			Deadline: parseTime(o.deadline.String), StartedAt: parseTime(o.started.String), EndedAt: parseTime(o.ended.String)}
	}
	return a, nil
}

// Actor reads one actor, with its latest snapshot and running operation.
func (j *Journal) Actor(ctx context.Context, id string) (Actor, error) {
	a, err := scanActorView(j.db.QueryRowContext(ctx, actorView+` WHERE a.id = ?`, id))
	return a, notFound(err, "actor", id)
}

// Actors lists every actor by id, each with its latest snapshot and
// running operation.
func (j *Journal) Actors(ctx context.Context) ([]Actor, error) {
	return list(ctx, j.db, scanActorView, actorView+` ORDER BY a.id`)
}

// SetActor records where an actor stands, outside any operation (the
// reconciler's corrections).
func (j *Journal) SetActor(ctx context.Context, id, state, reason string) error {
	return j.SetActorEnded(ctx, id, state, reason, 0, time.Time{})
}

// SetActorEnded is SetActor recording that actor id's process ended at at,
// found so rather than seen (code api.ExitUnknown when how is not known):
// state EXITED or CRASHED, as a restart policy reads it. A zero at records
// no end.
func (j *Journal) SetActorEnded(ctx context.Context, id, state, reason string, code int, at time.Time) error {
	return j.update(ctx, settles, "actor", id, `UPDATE actors SET state = ?, reason = ?, idle = 0, exit_code = ?, exited_at = ?, updated_at = ? WHERE id = ?`, state, reason, code, optionalTime(at), now(), id)
}

// SetActorSandbox records the runtime container id of the actor's next
// sandboxes.
func (j *Journal) SetActorSandbox(ctx context.Context, id, sandbox string) error {
	return j.update(ctx, starts, "actor", id, `UPDATE actors SET sandbox = ?, updated_at = ? WHERE id = ?`, sandbox, now(), id)
}

// SetActorNetwork records an actor's network as set up.
func (j *Journal) SetActorNetwork(ctx context.Context, id, network string) error {
	return j.update(ctx, starts, "actor", id, `UPDATE actors SET network = ?, updated_at = ? WHERE id = ?`, network, now(), id)
}

// DeleteActor forgets an actor, its events and its operations, all but
// keep (the operation deleting it, so that a retry of that request answers
// as it did); its snapshots' records stay until deleted themselves.
func (j *Journal) DeleteActor(ctx context.Context, id, keep string) error {
	return j.tx(ctx, settles, func(tx *sql.Tx) error {
		for _, q := range []string{`DELETE FROM events WHERE actor = ?`, `DELETE FROM actors WHERE id = ?`} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM operations WHERE actor = ? AND id != ?`, id, keep)
		return err
	})
}

// Start describes an operation that begins: the actor moves from one of
// From (any state when From is empty) to To, or is created in state To
// when Create is set, in the same transaction that records the operation.
type Start struct {
	Op     Operation
	From   []string
	To     string
	Create *Actor
	// Args, when set, makes the operation's arguments from the actor as it
	// stands inside the transaction, so that they are recorded from the
	// same state that was checked.
	Args func(before Actor) ([]byte, error)
}

// Began is an operation that Begin started, or found already there.
type Began struct {
	Op Operation
	// Actor is the actor as it stood before the operation began.
	Actor Actor
	// Replay says Op is an earlier operation of the same request.
	Replay bool
}

// BusyError says which operation holds the actor.
type BusyError struct {
	Actor string
	Op    Operation
}

func (e *BusyError) Error() string {
	step := e.Op.Step
	if step == "" {
		step = "starting"
	}
	return fmt.Sprintf("actor %s is busy with %s (operation %s, step %s); retry when it has ended", e.Actor, e.Op.Kind, e.Op.ID, step)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// StateError says an actor is not in a state the operation starts from.
type StateError struct {
	Actor, State, Kind string
	From               []string
}

func (e *StateError) Error() string {
	return fmt.Sprintf("actor %s is %s; %s needs it %s", e.Actor, e.State, e.Kind, strings.Join(e.From, " or "))
}

func (e *StateError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Begin starts an operation, deciding in one transaction, in this order:
// an operation of the same actor, kind and request id is a replay and is
// returned as it stands; an actor with another running operation is busy
// (*BusyError); an actor in a state not in From is refused (*StateError);
// otherwise the actor moves to To and the operation is recorded running.
func (j *Journal) Begin(ctx context.Context, s Start) (Began, error) {
	var b Began
	err := j.tx(ctx, starts, func(tx *sql.Tx) error {
		b = Began{}
		if s.Op.RequestID != "" {
			prev, err := scanOp(tx.QueryRowContext(ctx, `SELECT `+opCols+` FROM operations WHERE actor = ? AND kind = ? AND request_id = ?`, s.Op.Actor, s.Op.Kind, s.Op.RequestID))
			if err == nil {
				b.Op, b.Replay = prev, true
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if running, err := scanOp(tx.QueryRowContext(ctx, `SELECT `+opCols+` FROM operations WHERE actor = ? AND state = 'running'`, s.Op.Actor)); err == nil {
			return &BusyError{Actor: s.Op.Actor, Op: running}
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		ts := now()
		if s.Create != nil {
			a := *s.Create
			_, err := tx.ExecContext(ctx, `INSERT INTO actors(`+actorCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, a.ID, a.Template, a.runtime(), s.To, a.Reason, a.Sandbox, a.Snapshot, a.Network, false, 0, "", ts, ts)
			if isUnique(err) {
				return fmt.Errorf("actor %q: %w", a.ID, ErrExists)
			}
			if err != nil {
				return err
			}
			a.State = s.To
			b.Actor = a
		} else {
			a, err := scanActor(tx.QueryRowContext(ctx, `SELECT `+actorCols+` FROM actors WHERE id = ?`, s.Op.Actor))
			if err != nil {
				return notFound(err, "actor", s.Op.Actor)
			}
			if len(s.From) > 0 && !slices.Contains(s.From, a.State) {
				return &StateError{Actor: a.ID, State: a.State, Kind: s.Op.Kind, From: s.From}
			}
			if _, err := tx.ExecContext(ctx, `UPDATE actors SET state = ?, updated_at = ? WHERE id = ?`, s.To, ts, a.ID); err != nil {
				return err
			}
			b.Actor = a
		}
		op := s.Op
		op.State, op.StartedAt = OpRunning, parseTime(ts)
		if s.Args != nil {
			args, err := s.Args(b.Actor)
			if err != nil {
				return err
			}
			op.Args = args
		}
		if op.Args == nil {
			op.Args = []byte("{}")
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO operations(id, actor, kind, request_id, state, step, args, deadline, started_at) VALUES (?, ?, ?, ?, ?, '', ?, ?, ?)`,
			op.ID, op.Actor, op.Kind, op.RequestID, op.State, string(op.Args), optionalTime(op.Deadline), ts)
		b.Op = op
		return err
	})
	return b, err
}

// Step records that an operation is about to run step; it is durable when
// Step returns. On a full disk it fails (the reserve is for ending the
// operation), and the step must not run.
func (j *Journal) Step(ctx context.Context, opID, step string) error {
	return j.update(ctx, starts, "operation", opID, `UPDATE operations SET step = ? WHERE id = ?`, step, opID)
}

// End is how an operation ended.
type End struct {
	OpID string
	// State is OpDone or OpFailed, with the error and its category.
	State, Error, ErrorCode string
	Actor                   string
	// ActorState is where the actor stands now; "" leaves it alone (it
	// was deleted). Idle: its idle policy left it there. ExitCode and
	// ExitedAt: how and when its process ended (zero: it did not).
	ActorState, Reason string
	Idle               bool
	ExitCode           int
	ExitedAt           time.Time
}

// End closes an operation and sets its actor's state, in one transaction,
// and returns the actor as it stands then (not found when it was deleted).
func (j *Journal) End(ctx context.Context, e End) (Actor, error) {
	err := j.tx(ctx, settles, func(tx *sql.Tx) error {
		ts := now()
		if _, err := tx.ExecContext(ctx, `UPDATE operations SET state = ?, error = ?, error_code = ?, ended_at = ? WHERE id = ?`, e.State, e.Error, e.ErrorCode, ts, e.OpID); err != nil {
			return err
		}
		if e.ActorState == "" {
			return nil
		}
		_, err := tx.ExecContext(ctx, `UPDATE actors SET state = ?, reason = ?, idle = ?, exit_code = ?, exited_at = ?, updated_at = ? WHERE id = ?`, e.ActorState, e.Reason, e.Idle, e.ExitCode, optionalTime(e.ExitedAt), ts, e.Actor)
		return err
	})
	if err != nil {
		return Actor{}, err
	}
	return j.Actor(ctx, e.Actor)
}

const opCols = `id, actor, kind, request_id, state, step, args, error, error_code, deadline, started_at, ended_at`

func scanOp(row scanner) (Operation, error) {
	var o Operation
	var args, deadline, started, ended string
	err := row.Scan(&o.ID, &o.Actor, &o.Kind, &o.RequestID, &o.State, &o.Step, &args, &o.Error, &o.ErrorCode, &deadline, &started, &ended)
	o.Args, o.Deadline, o.StartedAt, o.EndedAt = []byte(args), parseTime(deadline), parseTime(started), parseTime(ended)
	return o, err
}

// Operation reads one operation.
func (j *Journal) Operation(ctx context.Context, id string) (Operation, error) {
	o, err := scanOp(j.db.QueryRowContext(ctx, `SELECT `+opCols+` FROM operations WHERE id = ?`, id))
	return o, notFound(err, "operation", id)
}

// Running lists the operations that have not ended: after a restart, the
// ones a crash interrupted.
func (j *Journal) Running(ctx context.Context) ([]Operation, error) {
	return list(ctx, j.db, scanOp, `SELECT `+opCols+` FROM operations WHERE state = 'running' ORDER BY started_at`)
}

// AddEvent appends to an actor's history.
func (j *Journal) AddEvent(ctx context.Context, e Event) (int64, error) {
	res, err := j.exec(ctx, starts, `INSERT INTO events(actor, operation, step, message, error, duration_ns, at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		e.Actor, e.Operation, e.Step, e.Message, e.Error, int64(e.Duration), now())
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// Events lists an actor's history after seq, oldest first, at most limit
// events (all when limit is 0), and the sequence number of its newest
// event (0 when it has none); every actor's when actor is empty.
func (j *Journal) Events(ctx context.Context, actor string, after int64, limit int) ([]Event, int64, error) {
	// One actor's rows by the (actor, seq) index; every actor's by seq.
	of, ofArgs := `actor = ?`, []any{actor}
	if actor == "" {
		of, ofArgs = `1`, nil
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	events, err := list(ctx, j.db, func(row scanner) (Event, error) {
		var e Event
		var d int64
		var at string
		err := row.Scan(&e.Seq, &e.Actor, &e.Operation, &e.Step, &e.Message, &e.Error, &d, &at)
		e.Duration, e.At = time.Duration(d), parseTime(at)
		return e, err
	}, `SELECT seq, actor, operation, step, message, error, duration_ns, at FROM events WHERE `+of+` AND seq > ? ORDER BY seq LIMIT ?`, append(ofArgs, after, limit)...)
	if err != nil {
		return nil, 0, err
	}
	var last int64
	err = j.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events WHERE `+of, ofArgs...).Scan(&last)
	return events, last, err
}

const snapCols = `id, actor, template, kind, scope, dir, stored, pushed, size, created_at`

func scanSnapshot(row scanner) (Snapshot, error) {
	var s Snapshot
	var created string
	err := row.Scan(&s.ID, &s.Actor, &s.Template, &s.Kind, &s.Scope, &s.Dir, &s.Stored, &s.Pushed, &s.Size, &created)
	s.CreatedAt = parseTime(created)
	return s, err
}

// PutSnapshot records a snapshot, or updates the record with that id
// (everything but its actor, template and creation time).
func (j *Journal) PutSnapshot(ctx context.Context, s Snapshot) error {
	_, err := j.exec(ctx, settles, putSnapshot, s.ID, s.Actor, s.Template, s.Kind, s.Scope, s.Dir, s.Stored, s.Pushed, s.Size, now())
	return err
}

const putSnapshot = `INSERT INTO snapshots(` + snapCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, scope = excluded.scope, dir = excluded.dir, stored = excluded.stored, pushed = excluded.pushed, size = excluded.size`

// AdoptSnapshot records s (as PutSnapshot) and makes it its actor's
// latest, in one transaction: one record, one write.
func (j *Journal) AdoptSnapshot(ctx context.Context, s Snapshot) error {
	return j.tx(ctx, settles, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, putSnapshot, s.ID, s.Actor, s.Template, s.Kind, s.Scope, s.Dir, s.Stored, s.Pushed, s.Size, now()); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE actors SET snapshot = ?, updated_at = ? WHERE id = ?`, s.ID, now(), s.Actor)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("actor %q: %w", s.Actor, ErrNotFound)
		}
		return nil
	})
}

// Snapshot reads one snapshot.
func (j *Journal) Snapshot(ctx context.Context, id string) (Snapshot, error) {
	s, err := scanSnapshot(j.db.QueryRowContext(ctx, `SELECT `+snapCols+` FROM snapshots WHERE id = ?`, id))
	return s, notFound(err, "snapshot", id)
}

// Snapshots lists snapshots, newest first; of one actor when actor is set.
func (j *Journal) Snapshots(ctx context.Context, actor string) ([]Snapshot, error) {
	return list(ctx, j.db, scanSnapshot, `SELECT `+snapCols+` FROM snapshots WHERE ? = '' OR actor = ? ORDER BY created_at DESC, id`, actor, actor)
}

// DeleteSnapshot forgets a snapshot.
func (j *Journal) DeleteSnapshot(ctx context.Context, id string) error {
	_, err := j.exec(ctx, settles, `DELETE FROM snapshots WHERE id = ?`, id)
	return err
}
