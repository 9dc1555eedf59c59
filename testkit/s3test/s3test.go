// Package s3test runs a real S3-compatible server, versitygw, on loopback
// for tests. scripts/install-versitygw.sh installs the pinned build.
package s3test

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // 127.0.0.1:PORT
	AccessKey string
	SecretKey string
}

// Start runs versitygw over a fresh folder until the test ends, and returns
// once it says it is listening.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		t.Fatal("versitygw is not on PATH: install it with scripts/install-versitygw.sh")
	}
	// Ask the kernel for a free port; versitygw binds it right after.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{Endpoint: addr, AccessKey: "stasis-test", SecretKey: "stasis-test-secret"}
	cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "posix", t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	var said []string
	for lines.Scan() {
		said = append(said, lines.Text())
		if strings.Contains(lines.Text(), "http://"+addr) {
			go func() {
				for lines.Scan() {
				}
			}()
			awaitListening(t, addr)
			return s
		}
	}
	t.Fatalf("versitygw exited before it listened on %s: %s", addr, strings.Join(said, "\n"))
	return nil
}

// awaitListening connects until the server accepts: versitygw prints its
// banner a moment before its listener is open.
func awaitListening(t testing.TB, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw does not accept connections on %s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Location is the store location of bucket on this server.
func (s *Server) Location(bucket string) string {
	return fmt.Sprintf("s3://%s/stasis?endpoint=%s&insecure=true&create=true", bucket, s.Endpoint)
}

// Env supplies the server's credentials as location.Open reads them.
func (s *Server) Env(key string) string {
	switch key {
	case "AWS_ACCESS_KEY_ID":
		return s.AccessKey
	case "AWS_SECRET_ACCESS_KEY":
		return s.SecretKey
	}
	return ""
}
