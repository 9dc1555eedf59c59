// Package server puts a service.Service on the wire as the API defined in
// api/proto/stasis/v1/stasis.proto: Connect, gRPC and gRPC-Web on one
// handler, binary or JSON bodies, bounded request sizes and strict JSON
// decoding, each error's category (package errdefs) as its code; gRPC
// server reflection; Prometheus metrics at /metrics and /healthz.
package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/stasis-run/stasis/api"
	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service"
)

// maxBodyBytes bounds the bytes of a request body as it comes off the
// socket (compressed or not); api.MaxRequestBytes bounds the message once
// decompressed.
const maxBodyBytes = api.MaxRequestBytes + 64<<10

// Handler serves s: every procedure, /metrics and /healthz. Serve it with
// HTTP/2 without TLS allowed (Protocols), as gRPC needs.
func Handler(s *service.Service) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(stasisv1connect.NewStasisHandler(handler{s}, connect.WithCodec(jsonCodec{}), connect.WithReadMaxBytes(api.MaxRequestBytes)))
	// gRPC server reflection, both versions clients ask for, so that
	// grpcurl and other tools list and call the procedures without the
	// proto file.
	reflector := grpcreflect.NewStaticReflector(stasisv1connect.StasisName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, connect.WithReadMaxBytes(api.MaxRequestBytes)))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, connect.WithReadMaxBytes(api.MaxRequestBytes)))
	monitoring(mux, s)
	return http.MaxBytesHandler(mux, maxBodyBytes)
}

// MetricsHandler serves /metrics and /healthz alone: for a TCP listener
// that Prometheus and health checks reach (stasisd --metrics-addr), where
// the procedures, which run sandboxes, must not be.
func MetricsHandler(s *service.Service) http.Handler {
	mux := http.NewServeMux()
	monitoring(mux, s)
	return http.MaxBytesHandler(mux, 4<<10)
}

// monitoring adds /metrics and /healthz to mux.
func monitoring(mux *http.ServeMux, s *service.Service) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// stasisd serves whatever state its store is in; the detail says.
		st := s.StoreStatus()
		detail := "store: none (--no-store)\n"
		switch {
		case st.Available:
			detail = "store: available " + st.Location + "\n"
		case st.Configured:
			detail = fmt.Sprintf("store: unavailable %s since %s: %s\n", st.Location, st.Since.UTC().Format(time.RFC3339), st.Error)
		}
		_, _ = w.Write([]byte("ok\n" + detail))
	})
}

// Protocols are those Handler is served with: HTTP/1.1 for Connect and
// curl, HTTP/2 without TLS (the socket is local) for gRPC.
func Protocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// handler is the service's procedures in the wire's types.
type handler struct{ s *service.Service }

// reply is v on the wire, or err with its category as the code.
func reply[T any, M any](v T, err error, wire func(T) *M) (*connect.Response[M], error) {
	if err != nil {
		return nil, connect.NewError(Code(err), err)
	}
	return connect.NewResponse(wire(v)), nil
}

func (h handler) CreateTemplate(ctx context.Context, r *connect.Request[stasisv1.Template]) (*connect.Response[stasisv1.Template], error) {
	t, err := h.s.CreateTemplate(ctx, api.TemplateFromWire(r.Msg))
	return reply(t, err, api.Template.Wire)
}

func (h handler) DeleteTemplate(ctx context.Context, r *connect.Request[stasisv1.TemplateName]) (*connect.Response[stasisv1.Empty], error) {
	return reply(struct{}{}, h.s.DeleteTemplate(ctx, r.Msg.GetName()), empty)
}

func (h handler) WarmTemplate(ctx context.Context, r *connect.Request[stasisv1.WarmRequest]) (*connect.Response[stasisv1.Template], error) {
	t, err := h.s.Warm(ctx, api.WarmRequestFromWire(r.Msg))
	return reply(t, err, api.Template.Wire)
}

func (h handler) ListTemplates(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.Templates], error) {
	t, err := h.s.Templates(ctx)
	return reply(api.Templates{Templates: t}, err, api.Templates.Wire)
}

func (h handler) Run(ctx context.Context, r *connect.Request[stasisv1.RunRequest]) (*connect.Response[stasisv1.Actor], error) {
	a, err := h.s.Run(ctx, api.RunRequestFromWire(r.Msg))
	return reply(a, err, api.Actor.Wire)
}

func (h handler) ListActors(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.Actors], error) {
	a, err := h.s.Actors(ctx)
	return reply(api.Actors{Actors: a}, err, api.Actors.Wire)
}

func (h handler) InspectActor(ctx context.Context, r *connect.Request[stasisv1.ActorID]) (*connect.Response[stasisv1.Actor], error) {
	a, err := h.s.Actor(ctx, r.Msg.GetId())
	return reply(a, err, api.Actor.Wire)
}

func (h handler) Pause(ctx context.Context, r *connect.Request[stasisv1.OpRequest]) (*connect.Response[stasisv1.Actor], error) {
	a, err := h.s.Pause(ctx, api.OpRequestFromWire(r.Msg))
	return reply(a, err, api.Actor.Wire)
}

func (h handler) Suspend(ctx context.Context, r *connect.Request[stasisv1.OpRequest]) (*connect.Response[stasisv1.Actor], error) {
	a, err := h.s.Suspend(ctx, api.OpRequestFromWire(r.Msg))
	return reply(a, err, api.Actor.Wire)
}

func (h handler) Resume(ctx context.Context, r *connect.Request[stasisv1.OpRequest]) (*connect.Response[stasisv1.Actor], error) {
	a, err := h.s.Resume(ctx, api.OpRequestFromWire(r.Msg))
	return reply(a, err, api.Actor.Wire)
}

func (h handler) Delete(ctx context.Context, r *connect.Request[stasisv1.DeleteRequest]) (*connect.Response[stasisv1.Deleted], error) {
	d, err := h.s.Delete(ctx, api.DeleteRequestFromWire(r.Msg))
	return reply(d, err, api.Deleted.Wire)
}

func (h handler) Exec(ctx context.Context, r *connect.Request[stasisv1.ExecRequest]) (*connect.Response[stasisv1.ExecResult], error) {
	res, err := h.s.Exec(ctx, api.ExecRequestFromWire(r.Msg))
	return reply(res, err, api.ExecResult.Wire)
}

func (h handler) ExecStream(ctx context.Context, r *connect.Request[stasisv1.ExecRequest], stream *connect.ServerStream[stasisv1.ExecOutput]) error {
	return h.execStreamed(ctx, api.ExecRequestFromWire(r.Msg), nil, nil, stream.Send)
}

// ExecAttach runs the command its first message asks for, with the later
// messages' input and window sizes passed on as they come.
func (h handler) ExecAttach(ctx context.Context, stream *connect.BidiStream[stasisv1.ExecInput, stasisv1.ExecOutput]) error {
	first, err := stream.Receive()
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("ExecAttach's first message must say what to run: %w", err))
	}
	if first.GetStart() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("ExecAttach's first message must hold start, the command to run"))
	}
	req := api.ExecRequestFromWire(first.GetStart())
	if len(req.Stdin) > 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("ExecAttach takes the command's input in the messages after the first, not in start.stdin"))
	}
	// The input is piped from the stream's later messages: one goroutine
	// receives them, and ends the pipe when the caller closes its side or
	// says the input ended. A message after that is refused by ending
	// the command's input with an error.
	stdinR, stdinW := io.Pipe()
	resize := make(chan api.WindowSize)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer stdinR.Close()
	go func() {
		defer close(resize)
		closed := false
		for {
			m, err := stream.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				stdinW.CloseWithError(err)
				return
			}
			if m.GetStart() != nil {
				stdinW.CloseWithError(errors.New("ExecAttach: a second start"))
				return
			}
			if len(m.GetStdin()) > 0 && !closed {
				if _, err := stdinW.Write(m.GetStdin()); err != nil {
					closed = true
				}
			}
			if m.GetStdinClosed() && !closed {
				stdinW.Close()
				closed = true
			}
			if w := api.WindowSizeFromWire(m.GetResize()); w != nil && req.TTY {
				select {
				case resize <- *w:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	var resizes <-chan api.WindowSize
	if req.TTY {
		resizes = resize
	}
	return h.execStreamed(ctx, req, stdinR, resizes, stream.Send)
}

// execStreamed runs req with its output sent as it comes, its exit code
// last.
func (h handler) execStreamed(ctx context.Context, req api.ExecRequest, stdin io.Reader, resize <-chan api.WindowSize, sendMsg func(*stasisv1.ExecOutput) error) error {
	// The command's stdout and stderr are copied by goroutines of their
	// own: one sends at a time.
	var mu sync.Mutex
	send := func(m *stasisv1.ExecOutput) error {
		mu.Lock()
		defer mu.Unlock()
		return sendMsg(m)
	}
	streams := api.ExecStreams{
		Stdin:  stdin,
		Stdout: writerFunc(func(b []byte) error { return send(&stasisv1.ExecOutput{Stdout: b}) }),
		Stderr: writerFunc(func(b []byte) error { return send(&stasisv1.ExecOutput{Stderr: b}) }),
		Resize: resize,
	}
	res, err := h.s.ExecStream(ctx, req, streams)
	if err == nil {
		code := int32(res.ExitCode)
		err = send(&stasisv1.ExecOutput{ExitCode: &code})
	}
	if err != nil && ctx.Err() == nil {
		return connect.NewError(Code(err), err)
	}
	return nil
}

// writerFunc is an io.Writer that hands each write to a function.
type writerFunc func([]byte) error

func (f writerFunc) Write(p []byte) (int, error) {
	if err := f(bytes.Clone(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (h handler) Events(ctx context.Context, r *connect.Request[stasisv1.EventsRequest]) (*connect.Response[stasisv1.Events], error) {
	e, err := h.s.Events(ctx, api.EventsRequestFromWire(r.Msg))
	return reply(e, err, api.Events.Wire)
}

func (h handler) WatchEvents(ctx context.Context, r *connect.Request[stasisv1.EventsRequest], stream *connect.ServerStream[stasisv1.Event]) error {
	err := h.s.WatchEvents(ctx, api.EventsRequestFromWire(r.Msg), func(e api.Event) error { return stream.Send(e.Wire()) })
	if err != nil && ctx.Err() == nil {
		return connect.NewError(Code(err), err)
	}
	return nil
}

func (h handler) Logs(ctx context.Context, r *connect.Request[stasisv1.LogsRequest], stream *connect.ServerStream[stasisv1.LogChunk]) error {
	err := h.s.Logs(ctx, api.LogsRequestFromWire(r.Msg), func(b []byte) error { return stream.Send(&stasisv1.LogChunk{Data: b}) })
	if err != nil && ctx.Err() == nil {
		return connect.NewError(Code(err), err)
	}
	return nil
}

func (h handler) ListSnapshots(ctx context.Context, r *connect.Request[stasisv1.SnapshotsRequest]) (*connect.Response[stasisv1.Snapshots], error) {
	l, err := h.s.Snapshots(ctx, r.Msg.GetActor())
	return reply(api.Snapshots{Snapshots: l}, err, api.Snapshots.Wire)
}

func (h handler) InspectSnapshot(ctx context.Context, r *connect.Request[stasisv1.SnapshotID]) (*connect.Response[stasisv1.Snapshot], error) {
	sn, err := h.s.Snapshot(ctx, r.Msg.GetId())
	return reply(sn, err, api.Snapshot.Wire)
}

func (h handler) StageSnapshot(ctx context.Context, r *connect.Request[stasisv1.StageRequest]) (*connect.Response[stasisv1.StagedSnapshot], error) {
	st, err := h.s.Stage(ctx, r.Msg.GetName())
	return reply(st, err, api.StagedSnapshot.Wire)
}

func (h handler) ListStaged(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.StagedSnapshots], error) {
	l, err := h.s.StagedSnapshots(ctx)
	return reply(api.StagedSnapshots{Staged: l}, err, api.StagedSnapshots.Wire)
}

func (h handler) Fingerprint(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.NodeFingerprint], error) {
	f, err := h.s.NodeInfo(ctx)
	return reply(f, err, api.FingerprintWire)
}

func (h handler) NodeInfo(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[structpb.Struct], error) {
	f, err := h.s.NodeInfo(ctx)
	var info *structpb.Struct
	if err == nil {
		info, err = api.NodeInfoWire(f)
	}
	return reply(info, err, func(s *structpb.Struct) *structpb.Struct { return s })
}

func (h handler) NodeStatus(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.NodeStatus], error) {
	st, err := h.s.NodeStatus(ctx, api.Empty{})
	return reply(st, err, api.NodeStatus.Wire)
}

func (h handler) RenewLease(ctx context.Context, r *connect.Request[stasisv1.LeaseRequest]) (*connect.Response[stasisv1.Lease], error) {
	l, err := h.s.RenewLease(ctx, api.LeaseRequestFromWire(r.Msg))
	return reply(l, err, api.Lease.Wire)
}

func (h handler) Lease(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.Lease], error) {
	l, err := h.s.Lease(ctx)
	return reply(l, err, api.Lease.Wire)
}

func (h handler) ReleaseLease(ctx context.Context, _ *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.Lease], error) {
	l, err := h.s.ReleaseLease(ctx)
	return reply(l, err, api.Lease.Wire)
}

func empty(struct{}) *stasisv1.Empty { return &stasisv1.Empty{} }

// jsonCodec takes the place of Connect's JSON codec: fields at their zero
// value are written too (the JSON API before the proto file wrote them, and
// its clients may read "lapsed": false), and a request that does not parse
// says which message it should have been.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", v)
	}
	return protojson.MarshalOptions{EmitDefaultValues: true}.Marshal(m)
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", v)
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		return fmt.Errorf("the request is not a valid %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// Code is the Connect code of err's category.
func Code(err error) connect.Code {
	name := errdefs.Code(err)
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		if c.String() == name {
			return c
		}
	}
	return connect.CodeInternal
}
