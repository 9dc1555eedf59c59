// Package server puts a service.Service on the wire as the API of package
// api: a Connect handler per procedure with JSON bodies, bounded request
// sizes and strict decoding, each error's category (package errdefs) as its
// code; Prometheus metrics at /metrics and /healthz.
package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service"
)

// maxBodyBytes bounds the bytes of a request body as it comes off the
// socket (compressed or not); api.MaxRequestBytes bounds the message once
// decompressed.
const maxBodyBytes = api.MaxRequestBytes + 64<<10

// Handler serves s: every procedure, /metrics and /healthz.
func Handler(s *service.Service) http.Handler {
	mux := http.NewServeMux()
	unary(mux, "CreateTemplate", s.CreateTemplate)
	unary(mux, "DeleteTemplate", func(ctx context.Context, r api.TemplateName) (api.Empty, error) {
		return api.Empty{}, s.DeleteTemplate(ctx, r.Name)
	})
	unary(mux, "WarmTemplate", s.Warm)
	unary(mux, "ListTemplates", func(ctx context.Context, _ api.Empty) (api.Templates, error) {
		t, err := s.Templates(ctx)
		return api.Templates{Templates: t}, err
	})
	unary(mux, "Run", s.Run)
	unary(mux, "ListActors", func(ctx context.Context, _ api.Empty) (api.Actors, error) {
		a, err := s.Actors(ctx)
		return api.Actors{Actors: a}, err
	})
	unary(mux, "InspectActor", func(ctx context.Context, r api.ActorID) (api.Actor, error) { return s.Actor(ctx, r.ID) })
	unary(mux, "Pause", s.Pause)
	unary(mux, "Suspend", s.Suspend)
	unary(mux, "Resume", s.Resume)
	unary(mux, "Delete", s.Delete)
	unary(mux, "Exec", s.Exec)
	unary(mux, "Events", s.Events)
	unary(mux, "ListSnapshots", func(ctx context.Context, r api.SnapshotsRequest) (api.Snapshots, error) {
		l, err := s.Snapshots(ctx, r.Actor)
		return api.Snapshots{Snapshots: l}, err
	})
	unary(mux, "InspectSnapshot", func(ctx context.Context, r api.SnapshotID) (api.Snapshot, error) { return s.Snapshot(ctx, r.ID) })
	unary(mux, "NodeInfo", func(ctx context.Context, _ api.Empty) (api.NodeInfo, error) { return s.NodeInfo(ctx) })
	unary(mux, "NodeStatus", s.NodeStatus)
	unary(mux, "RenewLease", s.RenewLease)
	unary(mux, "Lease", func(ctx context.Context, _ api.Empty) (api.Lease, error) { return s.Lease(ctx) })
	unary(mux, "ReleaseLease", func(ctx context.Context, _ api.Empty) (api.Lease, error) { return s.ReleaseLease(ctx) })
	mux.Handle("/metrics", promhttp.HandlerFor(s.Metrics().Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
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
	return http.MaxBytesHandler(mux, maxBodyBytes)
}

func unary[Req, Res any](mux *http.ServeMux, name string, fn func(context.Context, Req) (Res, error)) {
	procedure := api.Procedure(name)
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Res], error) {
		res, err := fn(ctx, *req.Msg)
		if err != nil {
			return nil, connect.NewError(Code(err), err)
		}
		return connect.NewResponse(&res), nil
	}, connect.WithCodec(api.Codec{}), connect.WithReadMaxBytes(api.MaxRequestBytes)))
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
