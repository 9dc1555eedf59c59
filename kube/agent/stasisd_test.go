package agent

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/stasis-run/stasis/api"
	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
)

// fakeStasisd answers the procedures a pass of the agent calls over a
// real socket, from the local actors it is given, and records the deletes
// asked of it: the agent's logic tested without a node.
type fakeStasisd struct {
	stasisv1connect.UnimplementedStasisHandler
	actors []*stasisv1.Actor

	// suspendGate, when set, holds each Suspend until it is closed;
	// suspendAsked, when set, hears of each as it comes.
	suspendGate  chan struct{}
	suspendAsked chan string

	mu        sync.Mutex
	deleted   []string
	suspended []string
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

func (f *fakeStasisd) ListActors(context.Context, *connect.Request[stasisv1.Empty]) (*connect.Response[stasisv1.Actors], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return connect.NewResponse(&stasisv1.Actors{Actors: slices.Clone(f.actors)}), nil
}

// Delete records the delete and removes the actor from those listed.
func (f *fakeStasisd) Delete(_ context.Context, req *connect.Request[stasisv1.DeleteRequest]) (*connect.Response[stasisv1.Deleted], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, req.Msg.Id)
	f.actors = slices.DeleteFunc(f.actors, func(a *stasisv1.Actor) bool { return a.Id == req.Msg.Id })
	return connect.NewResponse(&stasisv1.Deleted{Id: req.Msg.Id, Deleted: true}), nil
}

func (f *fakeStasisd) deletes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.deleted...)
}

// Suspend records the suspend asked, waits for suspendGate, and answers a
// suspend stored under the actor's name.
func (f *fakeStasisd) Suspend(ctx context.Context, req *connect.Request[stasisv1.OpRequest]) (*connect.Response[stasisv1.Actor], error) {
	f.mu.Lock()
	f.suspended = append(f.suspended, req.Msg.Id)
	f.mu.Unlock()
	if f.suspendAsked != nil {
		f.suspendAsked <- req.Msg.Id
	}
	if f.suspendGate != nil {
		select {
		case <-f.suspendGate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return connect.NewResponse(&stasisv1.Actor{Id: req.Msg.Id, Template: "t", State: "SUSPENDED",
		Snapshot: &stasisv1.Snapshot{Id: "snap-" + req.Msg.Id, Actor: req.Msg.Id, Stored: req.Msg.Id + ".snap-000000000001"}}), nil
}

func (f *fakeStasisd) suspends() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.suspended...)
}
