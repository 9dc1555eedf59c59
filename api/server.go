package api

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/service"
)

// Handler serves s: every procedure, /metrics and /healthz.
func Handler(s *service.Service) http.Handler {
	mux := http.NewServeMux()
	unary(mux, "CreateTemplate", s.CreateTemplate)
	unary(mux, "WarmTemplate", s.Warm)
	unary(mux, "ListTemplates", func(ctx context.Context, _ Empty) (Templates, error) {
		t, err := s.Templates(ctx)
		return Templates{Templates: t}, err
	})
	unary(mux, "Run", s.Run)
	unary(mux, "ListActors", func(ctx context.Context, _ Empty) (Actors, error) {
		a, err := s.Actors(ctx)
		return Actors{Actors: a}, err
	})
	unary(mux, "InspectActor", func(ctx context.Context, r ActorID) (service.Actor, error) { return s.Actor(ctx, r.ID) })
	unary(mux, "Pause", s.Pause)
	unary(mux, "Suspend", s.Suspend)
	unary(mux, "Resume", s.Resume)
	unary(mux, "Delete", s.Delete)
	unary(mux, "Exec", s.Exec)
	unary(mux, "Events", func(ctx context.Context, r EventsRequest) (Events, error) {
		e, err := s.Events(ctx, r.ID, r.After)
		return Events{Events: e}, err
	})
	unary(mux, "ListSnapshots", func(ctx context.Context, r SnapshotsRequest) (Snapshots, error) {
		l, err := s.Snapshots(ctx, r.Actor)
		return Snapshots{Snapshots: l}, err
	})
	unary(mux, "InspectSnapshot", func(ctx context.Context, r SnapshotID) (service.Snapshot, error) { return s.Snapshot(ctx, r.ID) })
	unary(mux, "NodeInfo", func(ctx context.Context, _ Empty) (NodeInfo, error) { return s.NodeInfo(ctx) })
	mux.Handle("/metrics", promhttp.HandlerFor(s.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

func unary[Req, Res any](mux *http.ServeMux, name string, fn func(context.Context, Req) (Res, error)) {
	procedure := "/" + ServiceName + "/" + name
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		res, err := fn(ctx, *req.Msg)
		if err != nil {
			return nil, connect.NewError(code(err), err)
		}
		return connect.NewResponse(&res), nil
	}, connect.WithCodec(jsonCodec{})))
}

// code maps the service's errors to Connect codes a client can act on.
func code(err error) connect.Code {
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, journal.ErrExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, journal.ErrBusy):
		return connect.CodeAborted
	case errors.Is(err, service.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.As(err, new(*journal.StateError)), errors.Is(err, engine.ErrRefused):
		return connect.CodeFailedPrecondition
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	}
	return connect.CodeInternal
}
