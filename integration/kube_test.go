package integration

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"crypto/tls"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// kubeBin is where scripts/install-kube.sh puts etcd and kube-apiserver.
const kubeBin = "/usr/local/lib/stasis/kube/bin"

// controlPlane is a real etcd and kube-apiserver on loopback, with token
// authentication, the Stasis CRDs installed and the lease namespace made.
type controlPlane struct {
	// kubeconfig is an administrator's; agentConfig and controllerConfig
	// authenticate as the service accounts of the chart (deploy/helm/stasis), so
	// that the agents and the controller run with only its roles.
	kubeconfig, agentConfig, controllerConfig string
	// server is the API server's URL.
	server string
	kube   client.Client
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// background runs a command until the test ends, its output in log; the
// channel is closed when it exits.
func background(t *testing.T, log string, name string, args ...string) <-chan struct{} {
	t.Helper()
	out, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		out.Close()
		if t.Failed() {
			data, _ := os.ReadFile(log)
			t.Logf("%s log (last 3000 bytes):\n%s", filepath.Base(log), tail(string(data), 3000))
		}
	})
	return exited
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(kubeBin, b)); err != nil {
			t.Fatalf("%s is not installed in %s: run scripts/install-kube.sh", b, kubeBin)
		}
	}
	dir := t.TempDir()
	etcdPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	background(t, filepath.Join(dir, "etcd.log"), filepath.Join(kubeBin, "etcd"), "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort))

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "sa.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		t.Fatal(err)
	}
	const token, agentToken, controllerToken = "stasis-test-token", "stasis-agent-token", "stasis-controller-token"
	tokens := filepath.Join(dir, "tokens.csv")
	users := token + ",admin,admin,system:masters\n" +
		agentToken + ",system:serviceaccount:stasis-system:stasis-agent,agent,system:serviceaccounts\n" +
		controllerToken + ",system:serviceaccount:stasis-system:stasis-controller,controller,system:serviceaccounts\n"
	if err := os.WriteFile(tokens, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	apiserver := background(t, filepath.Join(dir, "kube-apiserver.log"), filepath.Join(kubeBin, "kube-apiserver"),
		// No endpoint reconciler: it refuses a loopback address, and
		// nothing here reaches the API through the kubernetes Service.
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--secure-port", fmt.Sprint(apiPort), "--cert-dir", filepath.Join(dir, "certs"), "--token-auth-file", tokens,
		"--authorization-mode", "RBAC", "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", keyFile, "--service-account-signing-key-file", keyFile,
		"--service-cluster-ip-range", "10.96.0.0/24",
		// As kubeadm's and the managed clusters' API servers: the chart's
		// node pod runs stasisd privileged.
		"--allow-privileged=true")
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	ready := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, Timeout: 2 * time.Second}
	waitForLong(t, "kube-apiserver to be ready", 2*time.Minute, func() bool {
		select {
		case <-apiserver:
			t.Fatal("kube-apiserver exited before it was ready")
		default:
		}
		req, _ := http.NewRequest("GET", server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := ready.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	writeConfig := func(name, token string) string {
		path := filepath.Join(dir, name)
		text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: user, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: user}}]
current-context: test
`, server, token)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kubeconfig := writeConfig("kubeconfig", token)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := fleet.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kube, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Installed as users install it: the Helm chart rendered with its
	// defaults (deploy/kube/stasis.yaml, which scripts/test.sh checks is
	// what the chart renders): the CRDs, the service accounts and roles
	// the agents and controller authenticate as, and the controller's
	// Deployment and the agent's DaemonSet, which this API server accepts
	// but, having no kubelet, runs nowhere: the tests run those processes.
	if err := kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleet.DefaultLeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	applyYAML(t, kube, "../deploy/kube/stasis.yaml")
	waitFor(t, "the CRDs to serve", func() bool {
		return kube.List(ctx, &stasisv1alpha1.ActorList{}, client.InNamespace("default")) == nil &&
			kube.List(ctx, &stasisv1alpha1.SnapshotList{}, client.InNamespace("default")) == nil &&
			kube.List(ctx, &stasisv1alpha1.ActorTemplateList{}, client.InNamespace("default")) == nil
	})
	return &controlPlane{kubeconfig: kubeconfig, agentConfig: writeConfig("agent.kubeconfig", agentToken),
		controllerConfig: writeConfig("controller.kubeconfig", controllerToken), server: server, kube: kube}
}

// applyYAML creates every object of a multi-document YAML file.
func applyYAML(t *testing.T, kube client.Client, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range yamlObjects(t, data) {
		if err := kube.Create(context.Background(), u); err != nil {
			t.Fatalf("%s: create %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// yamlObjects are the objects of a multi-document YAML (a file of
// manifests, a Helm rendering); empty documents are left out.
func yamlObjects(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objects []*unstructured.Unstructured
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if len(obj) > 0 {
			objects = append(objects, &unstructured.Unstructured{Object: obj})
		}
	}
	return objects
}

func waitForLong(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out after %s waiting for %s", limit, what)
}

// kubeProc is one stasis-kube process (an agent or the controller) that a
// test can kill and start again.
type kubeProc struct {
	t    *testing.T
	name string
	args []string
	// env is added to the process's environment at its next start.
	env []string
	log *os.File
	cmd *exec.Cmd
	mu  sync.Mutex
}

var stasisKube = &program{name: "stasis-kube", pkg: "../cmd/stasis-kube"}

func (p *kubeProc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(stasisKube.path(p.t), p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = cmd
}

// kill sends SIGKILL: the process has no chance to release anything.
func (p *kubeProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

func newKubeProc(t *testing.T, name string, args ...string) *kubeProc {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &kubeProc{t: t, name: name, args: args, log: log}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			data, _ := os.ReadFile(log.Name())
			t.Logf("%s log (last 4000 bytes):\n%s", name, tail(string(data), 4000))
		}
		log.Close()
	})
	p.start()
	return p
}

// logHas tells whether the process's log holds s.
func (p *kubeProc) logHas(s string) bool { return strings.Contains(p.logText(), s) }

// logText is the process's log so far.
func (p *kubeProc) logText() string {
	data, _ := os.ReadFile(p.log.Name())
	return string(data)
}
