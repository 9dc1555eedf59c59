package api

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
)

// Client calls a stasisd over its unix socket. It is safe for concurrent
// use.
type Client struct {
	rpc stasisv1connect.StasisClient
	// h2 is rpc over HTTP/2 only, for the bidirectional streams, which
	// HTTP/1.1 cannot carry.
	h2     stasisv1connect.StasisClient
	socket string
}

// DefaultSocket is where stasisd listens unless told otherwise.
const DefaultSocket = "/run/stasis/stasisd.sock"

// Dial makes a client for the stasisd listening on socket. Nothing is
// connected until the first call.
func Dial(socket string) *Client {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		// A stasisd that cannot run (stopped by SIGSTOP, a debugger, a
		// frozen cgroup) still has its socket accept connections, and
		// would leave every call waiting for as long as the stop lasts.
		if pid := peerPID(conn); pid > 0 {
			if h := halt.Of(pid); h != nil {
				conn.Close()
				return nil, &stoppedDaemon{pid: pid, halt: h}
			}
		}
		return conn, nil
	}
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	return &Client{
		rpc:    stasisv1connect.NewStasisClient(&http.Client{Transport: &http.Transport{DialContext: dial}}, "http://stasisd"),
		h2:     stasisv1connect.NewStasisClient(&http.Client{Transport: &http.Transport{DialContext: dial, Protocols: &h2}}, "http://stasisd"),
		socket: socket,
	}
}

// stoppedDaemon is why a connection to stasisd was not used: its process
// cannot run, and would answer nothing.
type stoppedDaemon struct {
	pid  int
	halt *halt.Halt
}

func (e *stoppedDaemon) Error() string {
	return fmt.Sprintf("stasisd (pid %d) is %s, so it answers nothing: %s, then try again", e.pid, e.halt.How, e.halt.Mend)
}

// Error is an error stasisd answered with. errors.Is finds its category
// (package errdefs), so a client acts on it as the daemon would.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the error's category.
func (e *Error) Unwrap() error { return errdefs.ByCode(e.Code).Err }

// unary calls one procedure: the request on the wire, the answer back
// in this package's types, a failure explained.
func unary[Req, Res, M any](ctx context.Context, c *Client, method func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req, from func(*Res) M) (M, error) {
	res, err := method(ctx, connect.NewRequest(req))
	if err != nil {
		var zero M
		return zero, c.explain(err)
	}
	return from(res.Msg), nil
}

// explain turns a failure to reach stasisd into what to do about it, and
// a Connect error into an *Error with its code. Both can say unavailable:
// only a failure of the connection itself (a dial, a reset) means stasisd
// is out of reach; an answer of that category is an operation's own.
func (c *Client) explain(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	var stopped *stoppedDaemon
	if errors.As(ce.Unwrap(), &stopped) {
		return &Error{Code: errdefs.Code(errdefs.ErrUnavailable), Message: fmt.Sprintf("%v (its socket %s)", stopped, c.socket)}
	}
	var netErr net.Error
	if ce.Code() == connect.CodeUnavailable && errors.As(ce.Unwrap(), &netErr) && errors.Is(ce.Unwrap(), os.ErrPermission) {
		// The socket is there; this user may not use it.
		return &Error{Code: errdefs.Code(errdefs.ErrPermissionDenied), Message: fmt.Sprintf("this user (uid %d) may not use stasisd's socket %s: run as root (or the socket's owner), or give this user the socket (stasisd --socket-mode 0660 and its group changed to one this user is in; whoever can open it can run sandboxes): %s", os.Getuid(), c.socket, ce.Message())}
	}
	if ce.Code() == connect.CodeUnavailable && errors.As(ce.Unwrap(), &netErr) {
		return &Error{Code: errdefs.Code(errdefs.ErrUnavailable), Message: fmt.Sprintf("cannot reach stasisd at %s (is it running? start it with `stasisd`, or point --socket at its socket): %s", c.socket, ce.Message())}
	}
	return &Error{Code: ce.Code().String(), Message: ce.Message()}
}

func (c *Client) CreateTemplate(ctx context.Context, t Template) (Template, error) {
	return unary(ctx, c, c.rpc.CreateTemplate, t.Wire(), TemplateFromWire)
}

// DeleteTemplate removes a template that no actor uses; its golden
// snapshot goes with it.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	_, err := unary(ctx, c, c.rpc.DeleteTemplate, &stasisv1.TemplateName{Name: name}, none[stasisv1.Empty])
	return err
}

func (c *Client) WarmTemplate(ctx context.Context, r WarmRequest) (Template, error) {
	return unary(ctx, c, c.rpc.WarmTemplate, r.Wire(), TemplateFromWire)
}

func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	return unary(ctx, c, c.rpc.ListTemplates, &stasisv1.Empty{}, func(m *stasisv1.Templates) []Template {
		return fromWireAll(m.GetTemplates(), TemplateFromWire)
	})
}

func (c *Client) Run(ctx context.Context, r RunRequest) (Actor, error) {
	return unary(ctx, c, c.rpc.Run, r.Wire(), ActorFromWire)
}

func (c *Client) ListActors(ctx context.Context) ([]Actor, error) {
	return unary(ctx, c, c.rpc.ListActors, &stasisv1.Empty{}, func(m *stasisv1.Actors) []Actor {
		return fromWireAll(m.GetActors(), ActorFromWire)
	})
}

func (c *Client) InspectActor(ctx context.Context, id string) (Actor, error) {
	return unary(ctx, c, c.rpc.InspectActor, &stasisv1.ActorID{Id: id}, ActorFromWire)
}

func (c *Client) Pause(ctx context.Context, r OpRequest) (Actor, error) {
	return unary(ctx, c, c.rpc.Pause, r.Wire(), ActorFromWire)
}

func (c *Client) Suspend(ctx context.Context, r OpRequest) (Actor, error) {
	return unary(ctx, c, c.rpc.Suspend, r.Wire(), ActorFromWire)
}

func (c *Client) Resume(ctx context.Context, r OpRequest) (Actor, error) {
	return unary(ctx, c, c.rpc.Resume, r.Wire(), ActorFromWire)
}

func (c *Client) Delete(ctx context.Context, r DeleteRequest) (Deleted, error) {
	return unary(ctx, c, c.rpc.Delete, r.Wire(), DeletedFromWire)
}

func (c *Client) Events(ctx context.Context, id string, after int64) (Events, error) {
	return unary(ctx, c, c.rpc.Events, EventsRequest{ID: id, After: after}.Wire(), EventsFromWire)
}

func (c *Client) ListSnapshots(ctx context.Context, actor string) ([]Snapshot, error) {
	return unary(ctx, c, c.rpc.ListSnapshots, &stasisv1.SnapshotsRequest{Actor: actor}, func(m *stasisv1.Snapshots) []Snapshot {
		return fromWireAll(m.GetSnapshots(), SnapshotFromWire)
	})
}

func (c *Client) InspectSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return unary(ctx, c, c.rpc.InspectSnapshot, &stasisv1.SnapshotID{Id: id}, SnapshotFromWire)
}

// StageSnapshot makes a whole copy of the stored snapshot name on the
// node, so that an actor started from it there reads no store.
func (c *Client) StageSnapshot(ctx context.Context, name string) (StagedSnapshot, error) {
	return unary(ctx, c, c.rpc.StageSnapshot, &stasisv1.StageRequest{Name: name}, StagedSnapshotFromWire)
}

// ListStaged lists the node's staged copies of stored snapshots.
func (c *Client) ListStaged(ctx context.Context) ([]StagedSnapshot, error) {
	return unary(ctx, c, c.rpc.ListStaged, &stasisv1.Empty{}, func(m *stasisv1.StagedSnapshots) []StagedSnapshot {
		return fromWireAll(m.GetStaged(), StagedSnapshotFromWire)
	})
}

// NodeInfo reads the node's fingerprint (rpc Fingerprint; from a stasisd
// older than it, through the deprecated NodeInfo).
func (c *Client) NodeInfo(ctx context.Context) (NodeInfo, error) {
	f, err := unary(ctx, c, c.rpc.Fingerprint, &stasisv1.Empty{}, FingerprintFromWire)
	if apiErr := (*Error)(nil); !errors.As(err, &apiErr) || apiErr.Code != connect.CodeUnimplemented.String() {
		return f, err
	}
	//lint:ignore SA1019 the fallback for a stasisd older than Fingerprint
	info, err := unary(ctx, c, c.rpc.NodeInfo, &stasisv1.Empty{}, func(s *structpb.Struct) *structpb.Struct { return s })
	if err != nil {
		return NodeInfo{}, err
	}
	return NodeInfoFromWire(info)
}

// NodeStatus says where this node's stasisd stands: its store, its lease.
func (c *Client) NodeStatus(ctx context.Context) (NodeStatus, error) {
	return unary(ctx, c, c.rpc.NodeStatus, &stasisv1.Empty{}, NodeStatusFromWire)
}

// RenewLease takes or renews this node's fleet lease.
func (c *Client) RenewLease(ctx context.Context, r LeaseRequest) (Lease, error) {
	return unary(ctx, c, c.rpc.RenewLease, r.Wire(), LeaseFromWire)
}

// Lease says where this node's fleet lease stands.
func (c *Client) Lease(ctx context.Context) (Lease, error) {
	return unary(ctx, c, c.rpc.Lease, &stasisv1.Empty{}, LeaseFromWire)
}

// ReleaseLease gives this node's fleet lease up: nothing is fenced any
// more, and FENCED actors stay so until resumed.
func (c *Client) ReleaseLease(ctx context.Context) (Lease, error) {
	return unary(ctx, c, c.rpc.ReleaseLease, &stasisv1.Empty{}, LeaseFromWire)
}

func (c *Client) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	return unary(ctx, c, c.rpc.Exec, r.Wire(), ExecResultFromWire)
}

// ExecStream runs r's command and writes its output to stdout and stderr
// as it comes; it returns the command's exit code.
func (c *Client) ExecStream(ctx context.Context, r ExecRequest, stdout, stderr io.Writer) (int, error) {
	stream, err := c.rpc.ExecStream(ctx, connect.NewRequest(r.Wire()))
	if err != nil {
		return 0, c.explain(err)
	}
	defer stream.Close()
	return c.execOutput(r.ID, stdout, stderr, func() (*stasisv1.ExecOutput, error) {
		if stream.Receive() {
			return stream.Msg(), nil
		}
		return nil, cmp.Or(stream.Err(), io.EOF)
	})
}

// execOutput writes the output an exec's stream brings (receive gives its
// messages, io.EOF at its end) to stdout and stderr, and returns the
// command's exit code, which the last message holds.
func (c *Client) execOutput(id string, stdout, stderr io.Writer, receive func() (*stasisv1.ExecOutput, error)) (int, error) {
	for {
		m, err := receive()
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("exec in %s: the stream ended without the command's exit code", id)
		}
		if err != nil {
			return 0, c.explain(err)
		}
		if _, err := stdout.Write(m.GetStdout()); err != nil {
			return 0, err
		}
		if _, err := stderr.Write(m.GetStderr()); err != nil {
			return 0, err
		}
		if m.ExitCode != nil {
			return int(m.GetExitCode()), nil
		}
	}
}

// ExecAttach runs r's command with its standard input read from streams'
// Stdin as the command reads it (its end the command's end of file), its
// output written to Stdout and Stderr as it comes and, with r.TTY, each
// size from Resize passed on to its terminal; it returns the command's
// exit code.
func (c *Client) ExecAttach(ctx context.Context, r ExecRequest, streams ExecStreams) (int, error) {
	if streams.Stdout == nil {
		streams.Stdout = io.Discard
	}
	if streams.Stderr == nil {
		streams.Stderr = io.Discard
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.h2.ExecAttach(ctx)
	defer stream.CloseResponse()
	if err := stream.Send(&stasisv1.ExecInput{Start: r.Wire()}); err != nil {
		// A send fails with EOF when the server ended the stream: its
		// reason is what Receive reads.
		if _, rerr := stream.Receive(); rerr != nil && !errors.Is(rerr, io.EOF) {
			err = rerr
		}
		return 0, c.explain(err)
	}
	// One goroutine sends what the caller gives; the stream's send side
	// is used by it alone from here on.
	go func() {
		defer stream.CloseRequest()
		input := make(chan []byte)
		inputErr := make(chan error, 1)
		if streams.Stdin != nil {
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := streams.Stdin.Read(buf)
					if n > 0 {
						select {
						case input <- bytes.Clone(buf[:n]):
						case <-ctx.Done():
							return
						}
					}
					if err != nil {
						inputErr <- err
						return
					}
				}
			}()
		}
		for {
			var m *stasisv1.ExecInput
			select {
			case b := <-input:
				m = &stasisv1.ExecInput{Stdin: b}
			case <-inputErr:
				// Read errors end the input as its end does: the command
				// reads end of file.
				m = &stasisv1.ExecInput{StdinClosed: true}
			case w, ok := <-streams.Resize:
				if !ok {
					streams.Resize = nil
					continue
				}
				m = &stasisv1.ExecInput{Resize: w.Wire()}
			case <-ctx.Done():
				return
			}
			if stream.Send(m) != nil {
				return
			}
		}
	}()
	return c.execOutput(r.ID, streams.Stdout, streams.Stderr, stream.Receive)
}

// Watch passes each event of actor id's history after seq after to see,
// oldest first, then each as it is added, until ctx ends (nil), the actor
// is deleted (nil) or the stream breaks.
func (c *Client) Watch(ctx context.Context, id string, after int64, see func(Event)) error {
	stream, err := c.rpc.WatchEvents(ctx, connect.NewRequest(EventsRequest{ID: id, After: after}.Wire()))
	if err != nil {
		return c.explain(err)
	}
	defer stream.Close()
	for stream.Receive() {
		see(EventFromWire(stream.Msg()))
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return c.explain(err)
	}
	return nil
}

// Logs passes actor r.ID's console, as r picks it, to write, piece by
// piece as stasisd sends it; with r.Follow until ctx ends (nil) or the
// actor is deleted, exits or crashes.
func (c *Client) Logs(ctx context.Context, r LogsRequest, write func([]byte) error) error {
	stream, err := c.rpc.Logs(ctx, connect.NewRequest(r.Wire()))
	if err != nil {
		return c.explain(err)
	}
	defer stream.Close()
	for stream.Receive() {
		if err := write(stream.Msg().GetData()); err != nil {
			return err
		}
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return c.explain(err)
	}
	return nil
}

// WatchRetry is how long Follow waits before it watches again when a watch
// fails (the actor of a Run does not exist yet).
const WatchRetry = 250 * time.Millisecond

// Follow runs op, an operation on actor id (its result is op's to keep),
// and passes each event the actor's history gains meanwhile to see, oldest
// first, until op returns; then the events it added last. It starts from
// the end of the history (one call, not a read of it all); an actor that
// does not exist yet (a Run) starts from the beginning.
func (c *Client) Follow(ctx context.Context, id string, op func(context.Context) error, see func(Event)) error {
	var after int64
	if start, err := c.Events(ctx, id, math.MaxInt64); err == nil {
		after = start.Last
	}
	seen := func(e Event) {
		after = e.Seq
		see(e)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			_ = c.Watch(watchCtx, id, after, seen)
			select {
			case <-watchCtx.Done():
			case <-time.After(WatchRetry):
			}
		}
	}()
	err := op(ctx)
	stopWatching()
	<-watched
	// What the watch had not passed on when it stopped.
	if rest, werr := c.Events(ctx, id, after); werr == nil {
		for _, e := range rest.Events {
			seen(e)
		}
	}
	return err
}

func none[M any](*M) struct{} { return struct{}{} }
