package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stasis-run/stasis/api"
)

// TestMetricsOverTCP: stasisd --metrics-addr serves /metrics and /healthz,
// and nothing else (no procedure), over TCP, where Prometheus scrapes;
// the page carries each actor's state and its last operations, which go
// when the actor does. A second stasisd given the same address stops at
// its start, naming the flag.
func TestMetricsOverTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	d := newDaemon(t, "--metrics-addr", addr)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	d.op("Pause", "a1")
	d.op("Resume", "a1")

	get := func(path string) (int, string) { return httpGet(t, http.DefaultClient, "http://"+addr+path) }
	code, page := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics over TCP: %d", code)
	}
	for _, want := range []string{
		`stasis_actors{state="RUNNING"} 1`,
		`stasis_actor_state{actor="a1",state="RUNNING",template="counter"} 1`,
		`stasis_actor_last_operation_seconds{actor="a1",kind="run",result="done"}`,
		`stasis_actor_last_operation_seconds{actor="a1",kind="pause",result="done"}`,
		`stasis_actor_last_operation_seconds{actor="a1",kind="resume",result="done"}`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics has no %s; its stasis lines:\n%s", want, grepLines(page, "stasis_actor"))
		}
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.HasPrefix(body, "ok\n") {
		t.Fatalf("GET /healthz over TCP: %d %q", code, body)
	}
	// The procedures run sandboxes: the socket's alone.
	res, err := http.Post("http://"+addr+"/stasis.v1.Stasis/ListActors", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("a procedure over the metrics listener answered %d; want it not served", res.StatusCode)
	}

	if _, err := d.api.Delete(context.Background(), api.DeleteRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if _, page := get("/metrics"); strings.Contains(page, `actor="a1"`) {
		t.Fatalf("a deleted actor's series remain:\n%s", grepLines(page, `actor="a1"`))
	}

	data := t.TempDir()
	out, err := exec.Command(stasisd.path(t), "--data", data, "--socket", filepath.Join(data, "s.sock"), "--network", "none", "--no-store", "--metrics-addr", addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--metrics-addr "+addr) {
		t.Fatalf("a second stasisd on the same metrics address: %v\n%s", err, out)
	}
}

// httpGet is url's status and body, through client.
func httpGet(t *testing.T, client *http.Client, url string) (int, string) {
	t.Helper()
	res, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}
