package agent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

// Client calls the agent over the host's end of its port, a unix socket.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	next uint64
}

// Dial connects to the agent's socket.
func Dial(ctx context.Context, socket string) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("guest agent socket: %w", err)
	}
	// Ids start at a random number, so that a reply left on the port by an
	// earlier client never matches one of ours.
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	return &Client{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), next: binary.LittleEndian.Uint64(seed[:]) >> 1}, nil
}

// Close ends the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ErrNoReply is returned (wrapped) when the agent did not answer in time.
var ErrNoReply = errors.New("the guest agent did not answer")

// Call sends req and waits for its reply until ctx is done. A reply whose
// Error is set is returned with that error.
func (c *Client) Call(ctx context.Context, req Request) (Reply, error) {
	c.next++
	req.ID = c.next
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Time{}
	}
	if err := c.conn.SetDeadline(deadline); err != nil {
		return Reply{}, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Now()) })
	defer stop()
	line, err := json.Marshal(req)
	if err != nil {
		return Reply{}, err
	}
	// The leading newline ends any partial line an earlier client left.
	msg := append([]byte("\n"), append(line, '\n')...)
	if _, err := c.conn.Write(msg); err != nil {
		return Reply{}, fmt.Errorf("guest agent %s: %w", req.Op, err)
	}
	for {
		data, err := c.r.ReadBytes('\n')
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				cause := context.Cause(ctx)
				if cause == nil {
					cause = context.DeadlineExceeded
				}
				return Reply{}, fmt.Errorf("%w to %s: %w", ErrNoReply, req.Op, cause)
			}
			return Reply{}, fmt.Errorf("guest agent %s: %w", req.Op, err)
		}
		var rep Reply
		if json.Unmarshal(data, &rep) != nil || rep.ID != req.ID {
			continue
		}
		if rep.Error != "" {
			return rep, fmt.Errorf("guest agent %s: %s", req.Op, rep.Error)
		}
		return rep, nil
	}
}
