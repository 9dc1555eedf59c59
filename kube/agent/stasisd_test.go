package agent

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/stasis-run/stasis/api"
	apiv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
)

// fakeStasisd answers the procedures a pass of the agent calls over a
// real socket, from the local actors it is given, and records the deletes
// asked of it: the agent's logic tested without a node.
type fakeStasisd struct {
	stasisv1connect.UnimplementedStasisHandler
	actors []*apiv1.Actor

	mu      sync.Mutex
	deleted []string
}

// startFakeStasisd serves f on a socket in a folder of the test's and
// gives a client of it.
func startFakeStasisd(t *testing.T, f *fakeStasisd) *api.Client {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "stasisd.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(stasisv1connect.NewStasisHandler(f))
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return api.Dial(socket)
}

func (f *fakeStasisd) ListActors(context.Context, *connect.Request[apiv1.Empty]) (*connect.Response[apiv1.Actors], error) {
	return connect.NewResponse(&apiv1.Actors{Actors: f.actors}), nil
}

func (f *fakeStasisd) Delete(_ context.Context, req *connect.Request[apiv1.DeleteRequest]) (*connect.Response[apiv1.Deleted], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, req.Msg.Id)
	return connect.NewResponse(&apiv1.Deleted{Id: req.Msg.Id, Deleted: true}), nil
}

func (f *fakeStasisd) deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}
