package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"connectrpc.com/connect"

	"github.com/stasis-run/stasis/service"
)

// Client calls a stasisd over its unix socket.
type Client struct {
	http   *http.Client
	socket string
}

// Dial makes a client for the stasisd listening on socket. Nothing is
// connected until the first call.
func Dial(socket string) *Client {
	transport := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{http: &http.Client{Transport: transport}, socket: socket}
}

func call[Req, Res any](ctx context.Context, c *Client, name string, req Req) (Res, error) {
	client := connect.NewClient[Req, Res](c.http, "http://stasisd/"+ServiceName+"/"+name, connect.WithCodec(jsonCodec{}))
	res, err := client.CallUnary(ctx, connect.NewRequest(&req))
	if err != nil {
		var zero Res
		return zero, c.explain(err)
	}
	return *res.Msg, nil
}

// explain turns a failure to reach stasisd into what to do about it, and
// a Connect error into its message.
func (c *Client) explain(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		if ce.Code() == connect.CodeUnavailable {
			return fmt.Errorf("cannot reach stasisd at %s (is it running? start it with `stasisd`, or point --socket at its socket): %s", c.socket, ce.Message())
		}
		return &Error{Code: ce.Code().String(), Message: ce.Message()}
	}
	return err
}

// Error is an error stasisd answered with.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

func (c *Client) CreateTemplate(ctx context.Context, t service.Template) (service.Template, error) {
	return call[service.Template, service.Template](ctx, c, "CreateTemplate", t)
}

func (c *Client) WarmTemplate(ctx context.Context, r service.WarmRequest) (service.Template, error) {
	return call[service.WarmRequest, service.Template](ctx, c, "WarmTemplate", r)
}

func (c *Client) ListTemplates(ctx context.Context) ([]service.Template, error) {
	res, err := call[Empty, Templates](ctx, c, "ListTemplates", Empty{})
	return res.Templates, err
}

func (c *Client) Run(ctx context.Context, r service.RunRequest) (service.Actor, error) {
	return call[service.RunRequest, service.Actor](ctx, c, "Run", r)
}

func (c *Client) ListActors(ctx context.Context) ([]service.Actor, error) {
	res, err := call[Empty, Actors](ctx, c, "ListActors", Empty{})
	return res.Actors, err
}

func (c *Client) InspectActor(ctx context.Context, id string) (service.Actor, error) {
	return call[ActorID, service.Actor](ctx, c, "InspectActor", ActorID{ID: id})
}

// Op runs Pause, Suspend, Resume or Delete.
func (c *Client) Op(ctx context.Context, verb string, r service.OpRequest) (service.Actor, error) {
	return call[service.OpRequest, service.Actor](ctx, c, verb, r)
}

func (c *Client) Events(ctx context.Context, id string, after int64) ([]service.Event, error) {
	res, err := call[EventsRequest, Events](ctx, c, "Events", EventsRequest{ID: id, After: after})
	return res.Events, err
}

func (c *Client) ListSnapshots(ctx context.Context, actor string) ([]service.Snapshot, error) {
	res, err := call[SnapshotsRequest, Snapshots](ctx, c, "ListSnapshots", SnapshotsRequest{Actor: actor})
	return res.Snapshots, err
}

func (c *Client) InspectSnapshot(ctx context.Context, id string) (service.Snapshot, error) {
	return call[SnapshotID, service.Snapshot](ctx, c, "InspectSnapshot", SnapshotID{ID: id})
}

func (c *Client) NodeInfo(ctx context.Context) (NodeInfo, error) {
	return call[Empty, NodeInfo](ctx, c, "NodeInfo", Empty{})
}

func (c *Client) Exec(ctx context.Context, r service.ExecRequest) (service.ExecResult, error) {
	return call[service.ExecRequest, service.ExecResult](ctx, c, "Exec", r)
}
