package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/stasis-run/stasis/api"
	stasisv1 "github.com/stasis-run/stasis/api/gen/stasis/v1"
	"github.com/stasis-run/stasis/api/gen/stasis/v1/stasisv1connect"
	"github.com/stasis-run/stasis/errdefs"
)

// TestOneSocketEveryProtocol: the same procedures answer over Connect
// (binary and JSON), gRPC over HTTP/2 without TLS, gRPC-Web, and as a plain
// JSON POST in the shape the API had before it was defined in protobuf.
func TestOneSocketEveryProtocol(t *testing.T) {
	host := t.TempDir()
	c, raw, _ := serveService(t, host)
	ctx := context.Background()
	if _, err := c.CreateTemplate(ctx, api.Template{Name: "t", Rootfs: host, Args: []string{"/counter"}, MemoryBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	// gRPC needs HTTP/2: without TLS, the socket being local.
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2, DialContext: raw.Transport.(*http.Transport).DialContext}}
	clients := map[string]stasisv1connect.StasisClient{
		"connect+proto": stasisv1connect.NewStasisClient(raw, "http://stasisd"),
		"connect+json":  stasisv1connect.NewStasisClient(raw, "http://stasisd", connect.WithProtoJSON()),
		"grpc":          stasisv1connect.NewStasisClient(h2c, "http://stasisd", connect.WithGRPC()),
		"grpc-web":      stasisv1connect.NewStasisClient(raw, "http://stasisd", connect.WithGRPCWeb()),
	}
	for name, client := range clients {
		res, err := client.ListTemplates(ctx, connect.NewRequest(&stasisv1.Empty{}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := res.Msg.GetTemplates(); len(got) != 1 || got[0].GetName() != "t" || got[0].GetMemoryBytes() != 1<<30 {
			t.Fatalf("%s: templates %v", name, got)
		}
		// Errors keep their category on every protocol.
		_, err = client.InspectActor(ctx, connect.NewRequest(&stasisv1.ActorID{Id: "nobody"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Fatalf("%s: inspect of nothing: %v", name, err)
		}
	}

	// gRPC server reflection, as grpcurl asks: the service, then the file
	// that defines it, with the Logs stream.
	reflection := grpcreflect.NewClient(h2c, "http://stasisd", connect.WithGRPC()).NewStream(ctx)
	services, err := reflection.ListServices()
	if err != nil || !slices.Contains(services, protoreflect.FullName(stasisv1connect.StasisName)) {
		t.Fatalf("reflection: services %v, %v", services, err)
	}
	files, err := reflection.FileContainingSymbol(stasisv1connect.StasisName)
	if err != nil || len(files) == 0 || !slices.ContainsFunc(files[0].GetService()[0].GetMethod(), func(m *descriptorpb.MethodDescriptorProto) bool {
		return m.GetName() == "Logs" && m.GetServerStreaming()
	}) {
		t.Fatalf("reflection: the file of %s: %v", stasisv1connect.StasisName, err)
	}
	_, _ = reflection.Close()

	// A JSON client of the API before the proto file: the same request
	// bodies, the same field names in the answer, fields at their zero
	// value written.
	body, status := postJSON(t, raw, "Run", `{"template":"t","id":"a1","requestId":"r1"}`)
	if status != http.StatusOK {
		t.Fatalf("run: %d %s", status, body)
	}
	var actor map[string]any
	if err := json.Unmarshal(body, &actor); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"id", "template", "state", "sandbox", "createdAt", "updatedAt"} {
		if _, ok := actor[key]; !ok {
			t.Fatalf("run's answer has no %q: %s", key, body)
		}
	}
	if actor["state"] != "RUNNING" || actor["sandbox"] != "+a1+" {
		t.Fatalf("run's answer: %s", body)
	}
	body, _ = postJSON(t, raw, "Lease", `{}`)
	if !strings.Contains(string(body), `"lapsed":false`) {
		t.Fatalf("a field at its zero value is left out: %s", body)
	}
}

func postJSON(t *testing.T, c *http.Client, procedure, body string) ([]byte, int) {
	t.Helper()
	res, err := c.Post("http://stasisd"+api.Procedure(procedure), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return data, res.StatusCode
}

// TestWatchEvents: a watch passes the history, then each event as it is
// added, ends when the actor is deleted, and ends with unavailable when
// stasisd stops.
func TestWatchEvents(t *testing.T) {
	host := t.TempDir()
	c, _, svc := serveService(t, host)
	ctx := context.Background()
	if _, err := c.CreateTemplate(ctx, api.Template{Name: "t", Rootfs: host, Args: []string{"/counter"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, api.RunRequest{Template: "t", ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	history, err := c.Events(ctx, "a1", 0)
	if err != nil || len(history.Events) == 0 {
		t.Fatalf("history: %+v %v", history, err)
	}
	events := make(chan api.Event, 1000)
	watched := make(chan error, 1)
	go func() { watched <- c.Watch(ctx, "a1", 0, func(e api.Event) { events <- e }) }()
	// The history first, in order.
	for _, want := range history.Events {
		if got := <-events; got.Seq != want.Seq || got.Step != want.Step {
			t.Fatalf("event %d: got %+v, want %+v", want.Seq, got, want)
		}
	}
	// Then what an operation adds while the watch waits.
	if _, err := c.Pause(ctx, api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	after, err := c.Events(ctx, "a1", history.Last)
	if err != nil || len(after.Events) == 0 {
		t.Fatalf("the pause's events: %+v %v", after, err)
	}
	for _, want := range after.Events {
		if got := <-events; got.Seq != want.Seq || got.Step != want.Step {
			t.Fatalf("event %d: got %+v, want %+v", want.Seq, got, want)
		}
	}
	if _, err := c.Delete(ctx, api.DeleteRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if err := <-watched; err != nil {
		t.Fatalf("the watch of a deleted actor: %v", err)
	}

	// A watch of an actor that does not exist is refused as such.
	if err := c.Watch(ctx, "nobody", 0, func(api.Event) {}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a watch of nothing: %v", err)
	}

	// stasisd stopping ends a watch that would otherwise wait for ever.
	if _, err := c.Run(ctx, api.RunRequest{Template: "t", ID: "a2"}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	go func() {
		watched <- c.Watch(ctx, "a2", 0, func(api.Event) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
	}()
	<-started
	svc.StopWatching()
	select {
	case err := <-watched:
		if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "stopping") {
			t.Fatalf("a watch when stasisd stops: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the watch did not end when stasisd stopped")
	}
}
