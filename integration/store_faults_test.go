package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/store/location"
	"github.com/stasis-run/stasis/testkit/faultproxy"
	"github.com/stasis-run/stasis/testkit/gcstest"
	"github.com/stasis-run/stasis/testkit/s3test"
	"github.com/stasis-run/stasis/testkit/testactor"
)

// TestRemoteStoreUnderFaults puts a fault proxy between two stasisd and a
// real object store on one repository (S3: versitygw; GCS:
// fake-gcs-server): node a suspends actors with a push, node b starts them
// from the store (run --from-stored), while the proxy answers 503 to every
// third request, resets connections in the middle of pack bodies, stalls
// them, slows them down, and is down. Every case ends stored and resumed
// with the counter intact, or with a clear error and the actor stable;
// nothing half-written is left on either node. The times under faults
// beside the time without are logged as FAULTS lines.
func TestRemoteStoreUnderFaults(t *testing.T) {
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		proxy, err := faultproxy.Start("http://"+srv.Endpoint, true)
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		storeUnderFaults(t, proxy, fmt.Sprintf("s3://faults/stasis?endpoint=%s&insecure=true&create=true&stall=2s", proxy.Addr))
	})
	t.Run("gcs", func(t *testing.T) {
		srv := gcstest.Start(t)
		proxy, err := faultproxy.Start("http://"+srv.Endpoint, false)
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		t.Setenv("STORAGE_EMULATOR_HOST", proxy.Addr)
		storeUnderFaults(t, proxy, "gs://faults/stasis?create=true&project=stasis-test&stall=2s")
	})
}

func storeUnderFaults(t *testing.T, proxy *faultproxy.Proxy, loc string) {
	ctx := context.Background()
	if _, err := location.Repository(ctx, loc, true); err != nil {
		t.Fatal(err)
	}
	a, b := newDaemon(t, "--repo", loc), newDaemon(t, "--repo", loc)
	a.start("")
	b.start("")
	// Actors holding 48 MiB of their own, so that a pull reads several
	// stretches of packs.
	ballastTemplate(t, "counter", "48", a, b)
	move := func(id string) (push, pull time.Duration) {
		t.Helper()
		return moveByStore(t, a, b, "counter", id)
	}
	report := []string{"| faults | push (a) | run --from-stored (b) |", "|---|---|---|"}
	for _, c := range []struct {
		name   string
		faults faultproxy.Faults
	}{
		{"none", faultproxy.Faults{}},
		{"503 to every 3rd request", faultproxy.Faults{Every503: 3}},
		{"every 2nd pack read reset 64 KiB in, once a pack", faultproxy.Faults{ResetEvery: 2, ResetAfter: 64 << 10, Breakable: faultproxy.PackReads, OncePerObject: true}},
		{"every 2nd pack read stalled 64 KiB in, once a pack (stall=2s)", faultproxy.Faults{StallEvery: 2, StallAfter: 64 << 10, Breakable: faultproxy.PackReads, OncePerObject: true}},
		{"a slow link: each body at 64 MB/s", faultproxy.Faults{BytesPerSecond: 64 << 20}},
	} {
		proxy.Set(c.faults)
		id := fmt.Sprintf("f%d", len(report)-1)
		push, pull := move(id)
		report = append(report, fmt.Sprintf("| %s | %.2f s | %.2f s |", c.name, push.Seconds(), pull.Seconds()))
	}
	proxy.Set(faultproxy.Faults{})
	resets, stalls, _, unavailable := proxy.Counts()
	if resets == 0 || stalls == 0 || unavailable == 0 {
		t.Fatalf("the proxy reset %d, stalled %d and answered 503 to %d requests: a case did not happen", resets, stalls, unavailable)
	}
	if m := metrics(t, b); !strings.Contains(m, "stasis_store_up{") || metricValue(m, "stasis_store_resumed_reads_total") == 0 || metricValue(m, "stasis_store_stalls_total") == 0 {
		t.Fatalf("b's metrics do not show the resumed reads and stalls:\n%s", grepLines(m, "stasis_store"))
	}

	// Every pack read stalls: b's start from the store fails as the store's
	// fault (unavailable, naming it), in its answer and its log, and
	// leaves no sandbox.
	a.run("counter", "stalled")
	stalled := a.op("Suspend", "stalled")
	proxy.Set(faultproxy.Faults{StallEvery: 1, StallAfter: 64 << 10, Breakable: faultproxy.PackReads})
	_, err := b.api.Run(ctx, api.RunRequest{Template: "counter", ID: "stalled", FromStored: stalled.Snapshot.Stored})
	proxy.Set(faultproxy.Faults{})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "faults/stasis") {
		t.Fatalf("run --from-stored with every pack read stalled: %v; want unavailable, naming the store", err)
	}
	// The log line is written as the answer goes out: read once it is in.
	waitForLong(t, "b's log to say that the store did not deliver", time.Minute, func() bool {
		for _, line := range strings.Split(b.logText(), "\n") {
			if strings.Contains(line, `msg="operation ended"`) && strings.Contains(line, "actor=stalled") && strings.Contains(line, "code=unavailable") && strings.Contains(line, "faults/stasis") {
				return true
			}
		}
		return false
	})
	b.requireNoSandbox("stalled")
	b.op("Delete", "stalled")

	// The store down: b starts all the same, says why, and its own actors
	// pause and resume from their local snapshots; what needs the store is
	// refused as unavailable, a's suspend keeps its snapshot on the node.
	proxy.Set(faultproxy.Faults{Down: true})
	b.stop()
	b.start("")
	st, err := b.api.NodeStatus(ctx)
	if err != nil || st.Store.Available || st.Store.Error == "" {
		t.Fatalf("b's store with the store down: %+v %v", st.Store, err)
	}
	if body := healthz(t, b); !strings.Contains(body, "store: unavailable") {
		t.Fatalf("b's /healthz with the store down: %q", body)
	}
	b.run("counter", "local1")
	b.op("Pause", "local1")
	b.op("Resume", "local1")
	_, err = b.api.Run(ctx, api.RunRequest{Template: "counter", ID: "late", FromStored: "f2.nothing"})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "out of reach") {
		t.Fatalf("run --from-stored with the store down: %v; want unavailable saying why", err)
	}
	if _, err := b.api.InspectActor(ctx, "late"); err == nil {
		t.Fatal("the refused run left an actor")
	}
	a.run("counter", "g1")
	_, err = a.api.Suspend(ctx, api.OpRequest{ID: "g1"})
	if s := a.inspect("g1"); !errors.Is(err, errdefs.ErrUnavailable) || s.State != api.Suspended || !strings.Contains(s.Reason, "on this node only") {
		t.Fatalf("suspend with the store down: %+v %v; want unavailable, and the actor SUSPENDED with its snapshot kept on this node", s, err)
	}
	// Up again: b opens it in the background, a's next suspend stores it.
	proxy.Set(faultproxy.Faults{})
	waitForLong(t, "b to open its store again", time.Minute, func() bool {
		st, err := b.api.NodeStatus(ctx)
		return err == nil && st.Store.Available
	})
	if s := a.op("Suspend", "g1"); s.Snapshot == nil || s.Snapshot.Stored == "" {
		t.Fatalf("the suspend after the store came back: %+v", s)
	}
	move("g2")
	for _, d := range []*daemon{a, b} {
		entries, _ := os.ReadDir(filepath.Join(d.data, "snapshots"))
		for _, e := range entries {
			if left, _ := os.ReadDir(filepath.Join(d.data, "snapshots", e.Name())); len(left) == 0 {
				t.Errorf("an empty snapshot folder %s is left on %s", e.Name(), d.data)
			}
		}
	}
	t.Logf("FAULTS\n%s", strings.Join(report, "\n"))
}

// ballastTemplate makes template name on every daemon: the counter with
// mib MiB of memory of its own.
func ballastTemplate(t *testing.T, name, mib string, daemons ...*daemon) {
	t.Helper()
	for _, d := range daemons {
		dir := testactor.Bundle(t, t.TempDir(), testactor.Options{Ballast: []string{"0", mib, "0", "7"}})
		if _, err := d.api.CreateTemplate(context.Background(), api.Template{Name: name, Bundle: dir, Probe: api.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30}}); err != nil {
			t.Fatal(err)
		}
	}
}

// moveByStore runs actor id of template on a, counts once, suspends it into
// the store a and b share and starts it on b from there, where it must
// count on; it is then deleted on b, whose copy would serve the next pulls
// (actors of a template hold the same bytes), so that each pull reads the
// store. It returns the suspend's and the start's times.
func moveByStore(t *testing.T, a, b *daemon, template, id string) (push, pull time.Duration) {
	t.Helper()
	a.run(template, id)
	inst, _, _ := strings.Cut(a.execCounter(id, "incr"), " ")
	start := time.Now()
	s := a.op("Suspend", id)
	push = time.Since(start)
	if s.State != api.Suspended || s.Snapshot == nil || s.Snapshot.Stored == "" {
		t.Fatalf("%s suspended on a: %+v; want it stored", id, s)
	}
	start = time.Now()
	r, err := b.api.Run(context.Background(), api.RunRequest{Template: template, ID: id, FromStored: s.Snapshot.Stored})
	pull = time.Since(start)
	if err != nil || r.State != api.Running {
		t.Fatalf("%s started on b from %s: %+v %v", id, s.Snapshot.Stored, r, err)
	}
	if got := b.execCounter(id, "incr"); got != inst+" 2" {
		t.Fatalf("%s counts %q on b; want %s 2", id, got, inst)
	}
	b.op("Delete", id)
	return push, pull
}

// get reads path from stasisd's socket.
func (d *daemon) get(t *testing.T, path string) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.socket)
	}}}
	_, body := httpGet(t, client, "http://stasisd"+path)
	return body
}

func metrics(t *testing.T, d *daemon) string { return d.get(t, "/metrics") }
func healthz(t *testing.T, d *daemon) string { return d.get(t, "/healthz") }

// metricValue is the first sample of name in a Prometheus text page.
func metricValue(page, name string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, name) {
			var v float64
			fields := strings.Fields(line)
			fmt.Sscan(fields[len(fields)-1], &v)
			return v
		}
	}
	return 0
}

func grepLines(page, s string) string {
	var out []string
	for _, line := range strings.Split(page, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestStasisdStartsWithADamagedStore: a store whose config was emptied
// does not keep stasisd from starting; actors run, pause and resume from
// their local snapshots, a suspend keeps its snapshot on the node and says
// why, and the store's state is shown.
func TestStasisdStartsWithADamagedStore(t *testing.T) {
	ctx := context.Background()
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	d.stop()
	if err := os.WriteFile(filepath.Join(d.data, "store", "config"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.start("")
	st, err := d.api.NodeStatus(ctx)
	if err != nil || st.Store.Available || !strings.Contains(st.Store.Error, "config") {
		t.Fatalf("the store with its config emptied: %+v %v", st.Store, err)
	}
	inst, _, _ := strings.Cut(d.execCounter("a1", "incr"), " ")
	d.op("Pause", "a1")
	d.op("Resume", "a1")
	if _, err := d.api.Suspend(ctx, api.OpRequest{ID: "a1"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("suspend with the store damaged: %v; want unavailable", err)
	}
	if a := d.inspect("a1"); a.State != api.Suspended || !strings.Contains(a.Reason, "on this node only") {
		t.Fatalf("after the suspend: %+v", a)
	}
	d.op("Resume", "a1")
	if got := d.execCounter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("a1 counts %q", got)
	}
}
