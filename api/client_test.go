package api_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/stasis-run/stasis/api"
	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
	"github.com/stasis-run/stasis/errdefs"
)

// failing answers InspectActor with the error the actor's id names.
type failing struct {
	stasisv1connect.UnimplementedStasisHandler
}

func (failing) InspectActor(_ context.Context, r *connect.Request[stasisv1.ActorID]) (*connect.Response[stasisv1.Actor], error) {
	for c := connect.CodeCanceled; c <= connect.CodeUnauthenticated; c++ {
		if c.String() == r.Msg.GetId() {
			return nil, connect.NewError(c, errors.New("stasisd says "+r.Msg.GetId()))
		}
	}
	return nil, errors.New("no category at all")
}

// TestClientErrorsCarryTheirCategory: every category stasisd answers with
// reaches the caller as that category (errors.Is, the CLI's exit code),
// with stasisd's message; one the client does not know is internal; a
// socket nobody serves is unavailable, saying how to start stasisd.
func TestClientErrorsCarryTheirCategory(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "stasisd.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(stasisv1connect.NewStasisHandler(failing{}))
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	c := api.Dial(socket)
	ctx := context.Background()

	for _, cat := range errdefs.Categories {
		_, err := c.InspectActor(ctx, cat.Code)
		var apiErr *api.Error
		if !errors.Is(err, cat.Err) || !errors.As(err, &apiErr) || apiErr.Code != cat.Code || errdefs.Of(err).Exit != cat.Exit {
			t.Errorf("%s: got %v (%T); want that category, exit %d", cat.Code, err, err, cat.Exit)
		}
		if err != nil && err.Error() != "stasisd says "+cat.Code {
			t.Errorf("%s: message %q; want stasisd's own", cat.Code, err.Error())
		}
	}
	for _, code := range []string{"unauthenticated", "uncategorized"} {
		if _, err := c.InspectActor(ctx, code); errdefs.Of(err) != errdefs.Internal {
			t.Errorf("%s: got %v (%s); want internal", code, err, errdefs.Code(err))
		}
	}

	gone := api.Dial(filepath.Join(t.TempDir(), "none.sock"))
	_, err = gone.InspectActor(ctx, "a1")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach stasisd") || !strings.Contains(err.Error(), "start it with `stasisd`") {
		t.Fatalf("a socket nobody serves: %v; want unavailable saying how to start stasisd", err)
	}
}

// olderStasisd answers the node's fingerprint only through the deprecated
// NodeInfo, as a stasisd older than rpc Fingerprint does.
type olderStasisd struct {
	stasisv1connect.UnimplementedStasisHandler
	info api.NodeInfo
}

func (o olderStasisd) NodeInfo(context.Context, *connect.Request[stasisv1.Empty]) (*connect.Response[structpb.Struct], error) {
	s, err := api.NodeInfoWire(o.info)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(s), nil
}

// TestNodeInfoFromAnOlderStasisd: the client reads the fingerprint of a
// stasisd that has no rpc Fingerprint through NodeInfo.
func TestNodeInfoFromAnOlderStasisd(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "stasisd.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	want := api.NodeInfo{FormatVersion: 1, Hostname: "old-node", Arch: "amd64", Kernel: "6.1.0"}
	mux := http.NewServeMux()
	mux.Handle(stasisv1connect.NewStasisHandler(olderStasisd{info: want}))
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	got, err := api.Dial(socket).NodeInfo(context.Background())
	if err != nil || got.Hostname != want.Hostname || got.Kernel != want.Kernel || got.FormatVersion != 1 {
		t.Fatalf("NodeInfo from an older stasisd: %+v, %v; want %+v", got, err, want)
	}
}
