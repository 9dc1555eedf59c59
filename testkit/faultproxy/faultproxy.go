// Package faultproxy is an HTTP proxy for tests that stands between a
// client (stasisd, the CLI) and a real object store (versitygw,
// fake-gcs-server) and does to the traffic what networks do: reset a
// connection in the middle of a response body, answer 503 to every k-th
// request, stall a body, slow the link down, or refuse every connection.
// Faults are set and changed while it runs.
package faultproxy

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is what the proxy does to the traffic. The zero value forwards
// everything as it is.
type Faults struct {
	// Down refuses every request (the connection is closed at once), as a
	// store that is down.
	Down bool
	// Every503 answers every k-th request 503 Slow Down without
	// forwarding it (0: never).
	Every503 int
	// ResetEvery resets the connection of every k-th response that has a
	// body to break, ResetAfter bytes into the body (0: never).
	ResetEvery int
	ResetAfter int64
	// StallEvery stops sending every k-th such response StallAfter bytes
	// into its body, until the client gives up (0: never).
	StallEvery int
	StallAfter int64
	// BytesPerSecond slows every response body down to that rate (0: no
	// limit).
	BytesPerSecond int64
	// Breakable picks the requests whose bodies may be reset or stalled
	// (nil: every GET).
	Breakable func(*http.Request) bool
	// OncePerObject breaks each object's body once at most: the request
	// that resumes a broken read gets through, as on a link whose faults
	// come and go.
	OncePerObject bool
	// CorruptPuts flips one bit in the middle of every PUT's body, as a
	// link that damages what it carries.
	CorruptPuts bool
	// RefuseTrailers answers 501 Not Implemented to a request whose body
	// ends in a trailer (x-amz-trailer), as an S3-compatible server that
	// does not take them.
	RefuseTrailers bool
}

// Proxy forwards to one server.
type Proxy struct {
	// Addr is where it listens, HOST:PORT.
	Addr   string
	target *url.URL
	// keepHost passes the client's Host header on.
	keepHost bool
	srv      *http.Server
	ln       net.Listener

	mu     sync.Mutex
	faults Faults
	// broken holds the objects whose bodies were broken (OncePerObject).
	broken map[string]bool
	// requests and bodies count requests and breakable responses.
	requests, bodies atomic.Int64
	// Counts says what it did.
	resets, stalls, refused, unavailable, corrupted atomic.Int64
}

// Start proxies to target (http://HOST:PORT) on a free loopback port until
// Close. With keepHost the server gets the Host header the client sent (S3
// signs it); otherwise its own (fake-gcs-server routes by it).
func Start(target string, keepHost bool) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: u, ln: ln, keepHost: keepHost}
	p.srv = &http.Server{Handler: p}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops it.
func (p *Proxy) Close() { _ = p.srv.Close() }

// Set changes the faults from the next request on, and restarts the
// counts the faults go by.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
	p.broken = map[string]bool{}
	p.requests.Store(0)
	p.bodies.Store(0)
}

// Counts is what the proxy did: connections reset, bodies stalled,
// requests refused (down) and answered 503 or 501.
func (p *Proxy) Counts() (resets, stalls, refused, unavailable int64) {
	return p.resets.Load(), p.stalls.Load(), p.refused.Load(), p.unavailable.Load()
}

// Corrupted is how many PUT bodies it damaged (CorruptPuts).
func (p *Proxy) Corrupted() int64 { return p.corrupted.Load() }

// flipper flips the lowest bit of byte at of what it reads.
type flipper struct {
	r   io.ReadCloser
	at  int64
	pos int64
}

func (f *flipper) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if i := f.at - f.pos; i >= 0 && i < int64(n) {
		b[i] ^= 1
	}
	f.pos += int64(n)
	return n, err
}

func (f *flipper) Close() error { return f.r.Close() }

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	f := p.faults
	p.mu.Unlock()
	n := p.requests.Add(1)
	switch {
	case f.Down:
		p.refused.Add(1)
		hijackAndReset(w)
		return
	case f.Every503 > 0 && n%int64(f.Every503) == 0:
		p.unavailable.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`)
		return
	}
	if f.RefuseTrailers && r.Header.Get("X-Amz-Trailer") != "" {
		p.unavailable.Add(1)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotImplemented)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented.</Message></Error>`)
		return
	}
	out := r.Clone(r.Context())
	if f.CorruptPuts && r.Method == http.MethodPut && r.ContentLength > 0 {
		p.corrupted.Add(1)
		out.Body = &flipper{r: r.Body, at: r.ContentLength / 2}
	}
	out.URL.Scheme, out.URL.Host, out.RequestURI = p.target.Scheme, p.target.Host, ""
	out.Host = hostFor(p.keepHost, r.Host, p.target.Host)
	res, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, vs := range res.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(res.StatusCode)
	breakable := r.Method == http.MethodGet && res.StatusCode/100 == 2
	if f.Breakable != nil {
		breakable = breakable && f.Breakable(r)
	}
	if breakable && f.OncePerObject {
		p.mu.Lock()
		breakable = !p.broken[r.URL.Path]
		p.mu.Unlock()
	}
	limit := int64(-1) // bytes until the fault
	kind := ""
	if breakable {
		b := p.bodies.Add(1)
		switch {
		case f.ResetEvery > 0 && b%int64(f.ResetEvery) == 0:
			limit, kind = f.ResetAfter, "reset"
		case f.StallEvery > 0 && b%int64(f.StallEvery) == 0:
			limit, kind = f.StallAfter, "stall"
		}
		if kind != "" {
			p.mu.Lock()
			p.broken[r.URL.Path] = true
			p.mu.Unlock()
		}
	}
	p.copyBody(w, res.Body, limit, f.BytesPerSecond)
	switch kind {
	case "reset":
		p.resets.Add(1)
		hijackAndReset(w)
	case "stall":
		p.stalls.Add(1)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		// Hold the connection until the client gives up (or the test
		// ends): not a byte more.
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Minute):
		}
		hijackAndReset(w)
	}
}

func hostFor(keep bool, client, target string) string {
	if keep {
		return client
	}
	return target
}

// copyBody copies up to limit bytes (all when limit < 0) at most rate
// bytes a second (no limit when 0).
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader, limit, rate int64) {
	if limit >= 0 {
		body = io.LimitReader(body, limit)
	}
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	start := time.Now()
	var sent int64
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			sent += int64(n)
			if fl != nil {
				fl.Flush()
			}
			if rate > 0 {
				if ahead := time.Duration(float64(sent)/float64(rate)*float64(time.Second)) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// hijackAndReset closes the client's connection with a TCP reset, in the
// middle of whatever it was reading.
func hijackAndReset(w http.ResponseWriter) {
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// PackReads picks the reads of packs (objects under data/), for
// Faults.Breakable: the reads a pull makes.
func PackReads(r *http.Request) bool { return strings.Contains(r.URL.Path, "/data/") }
