// Package gcstest runs fake-gcs-server, a Google Cloud Storage emulator
// (scripts/install-fake-gcs.sh), for the tests of the GCS store: a real
// server of the GCS JSON API on loopback, its objects in a temporary folder.
package gcstest

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Server is a running fake-gcs-server.
type Server struct {
	// Endpoint is HOST:PORT; STORAGE_EMULATOR_HOST points the client at it.
	Endpoint string
}

// Start runs a server until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("fake-gcs-server")
	if err != nil {
		t.Fatal("fake-gcs-server is not on PATH: install it with scripts/install-fake-gcs.sh")
	}
	// Ask the kernel for a free port; the server binds it right after.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close()
	s := &Server{Endpoint: addr.String()}
	cmd := exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", fmt.Sprint(addr.Port), "-public-host", s.Endpoint,
		"-backend", "filesystem", "-filesystem-root", filepath.Join(t.TempDir(), "gcs"), "-log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", s.Endpoint)
		if err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake-gcs-server did not listen on %s: %v", s.Endpoint, err)
		}
	}
}

// Location is the store location of bucket on the server; the client finds
// the server through STORAGE_EMULATOR_HOST (Env).
func (s *Server) Location(bucket string) string {
	return fmt.Sprintf("gs://%s/stasis?create=true&project=stasis-test", bucket)
}
