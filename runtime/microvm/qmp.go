package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is one session on a QEMU Machine Protocol socket. Commands and
// events share the stream: events read while waiting for a command's
// answer are kept for waitEvent.
type qmp struct {
	conn    *net.UnixConn
	r       *bufio.Reader
	pending []qmpEvent
}

type qmpEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type qmpMessage struct {
	qmpEvent
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// dialQMP connects and leaves capability negotiation done.
func dialQMP(ctx context.Context, socket string) (*qmp, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("QMP socket: %w", err)
	}
	q := &qmp{conn: c.(*net.UnixConn), r: bufio.NewReader(c)}
	if err := q.withContext(ctx, func() error {
		if _, err := q.r.ReadBytes('\n'); err != nil { // the greeting
			return err
		}
		return q.execute(ctx, "qmp_capabilities", nil, nil)
	}); err != nil {
		q.close()
		return nil, fmt.Errorf("QMP handshake on %s: %w", socket, err)
	}
	return q, nil
}

func (q *qmp) close() { _ = q.conn.Close() }

// withContext runs fn with the connection's deadline following ctx.
func (q *qmp) withContext(ctx context.Context, fn func() error) error {
	deadline, _ := ctx.Deadline()
	if err := q.conn.SetDeadline(deadline); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = q.conn.SetDeadline(time.Now()) })
	defer stop()
	err := fn()
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", context.Cause(ctx), err)
	}
	return err
}

// execute runs a command and decodes its answer into result, if given.
func (q *qmp) execute(ctx context.Context, command string, args, result any) error {
	return q.executeWithFile(ctx, command, args, result, nil)
}

// executeWithFile sends f's descriptor along with the command, which is how
// getfd hands QEMU a file.
func (q *qmp) executeWithFile(ctx context.Context, command string, args, result any, f *os.File) error {
	return q.withContext(ctx, func() error {
		msg := map[string]any{"execute": command}
		if args != nil {
			msg["arguments"] = args
		}
		line, err := json.Marshal(msg)
		if err != nil {
			return err
		}
		line = append(line, '\n')
		if f != nil {
			_, _, err = q.conn.WriteMsgUnix(line, unix.UnixRights(int(f.Fd())), nil)
		} else {
			_, err = q.conn.Write(line)
		}
		if err != nil {
			return fmt.Errorf("QMP %s: %w", command, err)
		}
		for {
			m, err := q.read()
			if err != nil {
				return fmt.Errorf("QMP %s: %w", command, err)
			}
			switch {
			case m.Event != "":
				q.pending = append(q.pending, m.qmpEvent)
			case m.Error != nil:
				return fmt.Errorf("QMP %s: %s", command, m.Error.Desc)
			default:
				if result != nil {
					return json.Unmarshal(m.Return, result)
				}
				return nil
			}
		}
	})
}

func (q *qmp) read() (qmpMessage, error) {
	var m qmpMessage
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("malformed QMP message %q: %w", line, err)
	}
	return m, nil
}

// errQEMUGone is returned when the QMP socket closes under a wait: QEMU
// exited.
var errQEMUGone = errors.New("QEMU exited")

// waitEvent returns the first event, kept or new, that match accepts.
func (q *qmp) waitEvent(ctx context.Context, match func(qmpEvent) bool) (qmpEvent, error) {
	for i, ev := range q.pending {
		if match(ev) {
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			return ev, nil
		}
	}
	var found qmpEvent
	err := q.withContext(ctx, func() error {
		for {
			m, err := q.read()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return errQEMUGone
				}
				return err
			}
			if m.Event != "" && match(m.qmpEvent) {
				found = m.qmpEvent
				return nil
			}
			if m.Event != "" {
				q.pending = append(q.pending, m.qmpEvent)
			}
		}
	})
	return found, err
}

// migrationEvents has QEMU send MIGRATION events, which waitMigration
// waits for.
func (q *qmp) migrationEvents(ctx context.Context) error {
	return q.execute(ctx, "migrate-set-capabilities", map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}, nil)
}

// waitMigration waits for a migration to end and says how: nil when it
// completed, else why it failed (query-migrate's error-desc). QEMU exits
// right after an incoming migration fails, often before it can be asked
// why.
func (q *qmp) waitMigration(ctx context.Context) error {
	var status string
	_, err := q.waitEvent(ctx, func(ev qmpEvent) bool {
		var d struct{ Status string }
		_ = json.Unmarshal(ev.Data, &d)
		status = d.Status
		return ev.Event == "MIGRATION" && (d.Status == "completed" || d.Status == "failed" || d.Status == "cancelled")
	})
	if err != nil {
		return err
	}
	var info struct {
		Status    string `json:"status"`
		ErrorDesc string `json:"error-desc"`
	}
	if err := q.execute(ctx, "query-migrate", nil, &info); err != nil {
		if status == "completed" {
			return err
		}
		return fmt.Errorf("migration %s, and QEMU exited before it said why", status)
	}
	if info.Status != "completed" {
		return fmt.Errorf("migration %s: %s", info.Status, info.ErrorDesc)
	}
	return nil
}
