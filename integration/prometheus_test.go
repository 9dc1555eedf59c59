package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stasis-run/stasis/api"
)

// TestDashboardAndAlertsOnARealPrometheus: a real Prometheus (Debian's)
// scrapes a real stasisd over --metrics-addr, with actors in several
// states (running after a suspend and a resume, paused, one starting
// whose probe never answers), a fleet lease held and the store open. Every
// query of the Grafana dashboard (deploy/grafana/stasis.json) returns
// series, and every alert rule (deploy/prometheus/stasis-alerts.yaml)
// loads and evaluates without error.
func TestDashboardAndAlertsOnARealPrometheus(t *testing.T) {
	const prometheus = "/usr/bin/prometheus"
	if _, err := os.Stat(prometheus); err != nil {
		t.Fatalf("Debian's prometheus is needed (scripts/install-prometheus.sh): %v", err)
	}
	metricsAddr, promAddr := freeAddr(t), freeAddr(t)
	d := newDaemon(t, "--metrics-addr", metricsAddr)
	d.start("")
	ctx := context.Background()

	rules, err := filepath.Abs("../deploy/prometheus/stasis-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, fmt.Appendf(nil, `global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: stasisd
    static_configs: [{targets: [%q]}]
`, rules, metricsAddr), 0o600); err != nil {
		t.Fatal(err)
	}
	prom := exec.Command(prometheus, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	log := &strings.Builder{}
	prom.Stdout, prom.Stderr = log, log
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", log.String())
		}
	})

	d.template("counter", nil)
	d.run("counter", "a1")
	d.op("Suspend", "a1")
	d.op("Resume", "a1")
	d.run("counter", "a2")
	d.op("Pause", "a2")
	d.template("stuck", func(t *api.Template) {
		t.Probe = api.Probe{Command: []string{"/counter", "waitfile", "/never"}, TimeoutSeconds: 25}
	})
	starting := make(chan error, 1)
	go func() {
		_, err := d.api.Run(ctx, api.RunRequest{Template: "stuck", ID: "s1"})
		starting <- err
	}()
	t.Cleanup(func() { <-starting }) // before stasisd stops
	if _, err := d.api.RenewLease(ctx, api.LeaseRequest{Holder: "agent on test", ValidForSeconds: 600, Bound: []string{"a1", "a2", "s1"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "s1 to be starting", func() bool {
		a, err := d.api.InspectActor(ctx, "s1")
		return err == nil && a.State == api.Creating
	})

	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile("../deploy/grafana/stasis.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("deploy/grafana/stasis.json: %v", err)
	}
	queries := []string{`up{job="stasisd"}`} // the node variable's
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			queries = append(queries, strings.ReplaceAll(target.Expr, "$instance", ".*"))
		}
	}
	if len(queries) < 10 {
		t.Fatalf("the dashboard has %d queries", len(queries))
	}
	// Each query answers once Prometheus has scraped what it reads (rates
	// need two scrapes after the operations).
	for _, q := range queries {
		var got int
		waitForLong(t, "series for "+q, time.Minute, func() bool {
			got = promSeries(t, promAddr, q)
			return got > 0
		})
		t.Logf("%d series: %s", got, q)
	}

	var answer struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
	}
	waitForLong(t, "the alert rules to be evaluated", time.Minute, func() bool {
		promGet(t, promAddr, "/api/v1/rules", &answer)
		n := 0
		for _, g := range answer.Data.Groups {
			for _, r := range g.Rules {
				if r.Health == "ok" {
					n++
				}
			}
		}
		return n == 7
	})
	for _, g := range answer.Data.Groups {
		for _, r := range g.Rules {
			if r.Health != "ok" || r.LastError != "" {
				t.Errorf("rule %s: %s %s", r.Name, r.Health, r.LastError)
			}
		}
	}
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// promSeries is how many series Prometheus at addr answers query with
// now; 0 while it does not answer.
func promSeries(t *testing.T, addr, query string) int {
	var answer struct {
		Status string
		Error  string
		Data   struct{ Result []json.RawMessage }
	}
	if !promGet(t, addr, "/api/v1/query?query="+url.QueryEscape(query), &answer) {
		return 0
	}
	if answer.Status != "success" {
		t.Fatalf("query %s: %s", query, answer.Error)
	}
	return len(answer.Data.Result)
}

// promGet decodes the JSON answer of Prometheus at addr to path; false
// while it does not answer.
func promGet(t *testing.T, addr, path string, into any) bool {
	res, err := http.Get("http://" + addr + path)
	if err != nil {
		return false
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusServiceUnavailable {
		return false // starting
	}
	if err := json.NewDecoder(res.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return true
}
