package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/service/hostpolicy"
	"github.com/stasis-run/stasis/service/server"
	"github.com/stasis-run/stasis/testkit/runtimetest"
)

// serve runs the handler over a fake runtime on a unix socket and returns
// a client and a raw HTTP client for it.
func serve(t *testing.T) (*api.Client, *http.Client) {
	c, raw, _ := serveService(t, "")
	return c, raw
}

// serveService is serve, of the service it returns, whose templates may
// use the folder host.
func serveService(t *testing.T, host string) (*api.Client, *http.Client, *service.Service) {
	t.Helper()
	data := t.TempDir()
	cfg := service.Config{DataDir: data, Engine: &engine.Engine{Runtime: runtimetest.New()}}
	if host != "" {
		cfg.HostPaths = hostpolicy.Policy{Paths: []hostpolicy.Path{{Path: host}}, DataDir: data, TemplatesDir: filepath.Join(data, "templates")}
	}
	svc, err := service.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	socket := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: server.Handler(svc), Protocols: server.Protocols()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	return api.Dial(socket), raw, svc
}

// post sends body to a procedure as curl would and returns the status and
// the Connect error code.
func post(t *testing.T, c *http.Client, procedure string, body io.Reader, gzipped bool) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://stasisd"+api.Procedure(procedure), body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if gzipped {
		req.Header.Set("Content-Encoding", "gzip")
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var e struct{ Code, Message string }
	_ = json.Unmarshal(data, &e)
	return res.StatusCode, e.Code, e.Message
}

func TestUnknownFieldsAreRefused(t *testing.T) {
	_, raw := serve(t)
	status, code, msg := post(t, raw, "Delete", strings.NewReader(`{"id":"a1","purg":true}`), false)
	if code != "invalid_argument" || !strings.Contains(msg, `unknown field "purg"`) {
		t.Fatalf("a misspelt field: %d %s %s", status, code, msg)
	}
	// purge is Delete's; Suspend refuses it rather than ignoring it.
	if _, code, msg := post(t, raw, "Suspend", strings.NewReader(`{"id":"a1","purge":true}`), false); code != "invalid_argument" {
		t.Fatalf("purge on a suspend: %s %s", code, msg)
	}
	if _, code, _ := post(t, raw, "InspectActor", strings.NewReader(`{"id":"a1"} {"id":"a2"}`), false); code != "invalid_argument" {
		t.Fatalf("two JSON values: %s", code)
	}
	if _, code, _ := post(t, raw, "InspectActor", strings.NewReader(`{"id":"a1"}`), false); code != "not_found" {
		t.Fatalf("a well-formed request for nothing: %s", code)
	}
}

// TestRequestLimits: a body over the limit, and a small gzip body that
// inflates past it, are refused with resource_exhausted without the
// daemon's memory growing by their size.
func TestRequestLimits(t *testing.T) {
	_, raw := serve(t)
	huge := `{"name":"` + strings.Repeat("x", 100<<20) + `"}`
	if _, code, msg := post(t, raw, "CreateTemplate", strings.NewReader(huge), false); code != "resource_exhausted" {
		t.Fatalf("a 100 MB body: %s %s", code, msg)
	}
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	_, _ = zw.Write([]byte(`{"name":"`))
	zeros := make([]byte, 1<<20)
	for range 1024 {
		_, _ = zw.Write(zeros)
	}
	_, _ = zw.Write([]byte(`"}`))
	zw.Close()
	if bomb.Len() > 4<<20 {
		t.Fatalf("the gzip bomb is %d bytes", bomb.Len())
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, code, msg := post(t, raw, "CreateTemplate", &bomb, true)
	runtime.ReadMemStats(&after)
	if code != "resource_exhausted" || !strings.Contains(msg, "larger than configured max") {
		t.Fatalf("a gzip body inflating to 1 GiB: %s %s", code, msg)
	}
	if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 64<<20 {
		t.Fatalf("the server allocated %d MiB for a refused request", grew>>20)
	}
}

// TestErrorsKeepTheirCategory: the client's errors carry the code and
// match the category with errors.Is, as on the server.
func TestErrorsKeepTheirCategory(t *testing.T) {
	c, _ := serve(t)
	_, err := c.InspectActor(context.Background(), "nobody")
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != "not_found" || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("inspect of nothing: %v", err)
	}
	if _, err := c.CreateTemplate(context.Background(), api.Template{Name: "Bad Name"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a malformed template: %v", err)
	}
	down := api.Dial(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := down.ListActors(context.Background()); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "is it running?") {
		t.Fatalf("no daemon: %v", err)
	}
	for _, cat := range errdefs.Categories {
		if got := server.Code(cat.Err); got.String() != cat.Code {
			t.Errorf("category %s maps to %s", cat.Code, got)
		}
	}
}
