package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/stasis-run/stasis/errdefs"
)

// Client calls a stasisd over its unix socket. It is safe for concurrent
// use.
type Client struct {
	http   *http.Client
	socket string
}

// DefaultSocket is where stasisd listens unless told otherwise.
const DefaultSocket = "/run/stasis/stasisd.sock"

// Dial makes a client for the stasisd listening on socket. Nothing is
// connected until the first call.
func Dial(socket string) *Client {
	transport := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{http: &http.Client{Transport: transport}, socket: socket}
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

func call[Req, Res any](ctx context.Context, c *Client, name string, req Req) (Res, error) {
	client := connect.NewClient[Req, Res](c.http, "http://stasisd"+Procedure(name), connect.WithCodec(Codec{}))
	res, err := client.CallUnary(ctx, connect.NewRequest(&req))
	if err != nil {
		var zero Res
		return zero, c.explain(err)
	}
	return *res.Msg, nil
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
	var netErr net.Error
	if ce.Code() == connect.CodeUnavailable && errors.As(ce.Unwrap(), &netErr) {
		return &Error{Code: errdefs.Code(errdefs.ErrUnavailable), Message: fmt.Sprintf("cannot reach stasisd at %s (is it running? start it with `stasisd`, or point --socket at its socket): %s", c.socket, ce.Message())}
	}
	return &Error{Code: ce.Code().String(), Message: ce.Message()}
}

func (c *Client) CreateTemplate(ctx context.Context, t Template) (Template, error) {
	return call[Template, Template](ctx, c, "CreateTemplate", t)
}

// DeleteTemplate removes a template that no actor uses; its golden
// snapshot goes with it.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	_, err := call[TemplateName, Empty](ctx, c, "DeleteTemplate", TemplateName{Name: name})
	return err
}

func (c *Client) WarmTemplate(ctx context.Context, r WarmRequest) (Template, error) {
	return call[WarmRequest, Template](ctx, c, "WarmTemplate", r)
}

func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	res, err := call[Empty, Templates](ctx, c, "ListTemplates", Empty{})
	return res.Templates, err
}

func (c *Client) Run(ctx context.Context, r RunRequest) (Actor, error) {
	return call[RunRequest, Actor](ctx, c, "Run", r)
}

func (c *Client) ListActors(ctx context.Context) ([]Actor, error) {
	res, err := call[Empty, Actors](ctx, c, "ListActors", Empty{})
	return res.Actors, err
}

func (c *Client) InspectActor(ctx context.Context, id string) (Actor, error) {
	return call[ActorID, Actor](ctx, c, "InspectActor", ActorID{ID: id})
}

func (c *Client) Pause(ctx context.Context, r OpRequest) (Actor, error) {
	return call[OpRequest, Actor](ctx, c, "Pause", r)
}

func (c *Client) Suspend(ctx context.Context, r OpRequest) (Actor, error) {
	return call[OpRequest, Actor](ctx, c, "Suspend", r)
}

func (c *Client) Resume(ctx context.Context, r OpRequest) (Actor, error) {
	return call[OpRequest, Actor](ctx, c, "Resume", r)
}

func (c *Client) Delete(ctx context.Context, r DeleteRequest) (Deleted, error) {
	return call[DeleteRequest, Deleted](ctx, c, "Delete", r)
}

func (c *Client) Events(ctx context.Context, id string, after int64) (Events, error) {
	return call[EventsRequest, Events](ctx, c, "Events", EventsRequest{ID: id, After: after})
}

func (c *Client) ListSnapshots(ctx context.Context, actor string) ([]Snapshot, error) {
	res, err := call[SnapshotsRequest, Snapshots](ctx, c, "ListSnapshots", SnapshotsRequest{Actor: actor})
	return res.Snapshots, err
}

func (c *Client) InspectSnapshot(ctx context.Context, id string) (Snapshot, error) {
	return call[SnapshotID, Snapshot](ctx, c, "InspectSnapshot", SnapshotID{ID: id})
}

func (c *Client) NodeInfo(ctx context.Context) (NodeInfo, error) {
	return call[Empty, NodeInfo](ctx, c, "NodeInfo", Empty{})
}

// NodeStatus says where this node's stasisd stands: its store, its lease.
func (c *Client) NodeStatus(ctx context.Context) (NodeStatus, error) {
	return call[Empty, NodeStatus](ctx, c, "NodeStatus", Empty{})
}

// RenewLease takes or renews this node's fleet lease.
func (c *Client) RenewLease(ctx context.Context, r LeaseRequest) (Lease, error) {
	return call[LeaseRequest, Lease](ctx, c, "RenewLease", r)
}

// Lease says where this node's fleet lease stands.
func (c *Client) Lease(ctx context.Context) (Lease, error) {
	return call[Empty, Lease](ctx, c, "Lease", Empty{})
}

// ReleaseLease gives this node's fleet lease up: nothing is fenced any
// more, and FENCED actors stay so until resumed.
func (c *Client) ReleaseLease(ctx context.Context) (Lease, error) {
	return call[Empty, Lease](ctx, c, "ReleaseLease", Empty{})
}

func (c *Client) Exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	return call[ExecRequest, ExecResult](ctx, c, "Exec", r)
}

// FollowInterval is how often Follow asks for new events.
const FollowInterval = 250 * time.Millisecond

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
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	poll := func() {
		res, err := c.Events(ctx, id, after)
		if err != nil {
			return
		}
		for _, e := range res.Events {
			after = e.Seq
			see(e)
		}
	}
	tick := time.NewTicker(FollowInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			poll()
			return err
		case <-tick.C:
			poll()
		}
	}
}
