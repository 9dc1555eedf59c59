package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonClient runs the Python client's test (clients/python/tests)
// against a real stasisd, over gRPC on its socket: run, inspect, exec,
// suspend, resume, delete, an actor's events followed until it is deleted,
// errors raised as the exception of their category.
func TestPythonClient(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3 with grpcio and protobuf is needed (scripts/install-python-client.sh): %v\n%s", err, out)
	}
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	root, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-m", "unittest", "-v", "live_test")
	cmd.Dir = filepath.Join(root, "tests")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+root, "PYTHONDONTWRITEBYTECODE=1", "STASIS_SOCKET="+d.socket, "STASIS_TEMPLATE=counter")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "OK") {
		t.Fatalf("the Python client's test: %v", err)
	}
}
