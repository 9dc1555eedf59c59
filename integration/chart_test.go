package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestChartNodeRunsAsRendered: the Helm chart's node pod (stasisd.run pod,
// its default) run as a kubelet would run it, without one: stasisd from the
// command and arguments the chart renders, $(NODE_IP) expanded, on the host
// folders its volumes name at the same paths. The agent's socket is the one
// that stasisd serves; the metrics port of the readiness probe and the
// Service answers, with an actor run through that socket; a suspend reaches
// the store the chart names.
func TestChartNodeRunsAsRendered(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is needed: scripts/install-helm.sh (%v)", err)
	}
	runsc, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t)
	store, cni := t.TempDir(), t.TempDir()
	// The shared store is made once, as docs/kubernetes.md says.
	if out, err := exec.Command(stasisCLI.path(t), "store", "init", "--repo", store).CombinedOutput(); err != nil {
		t.Fatalf("stasis store init: %v: %s", err, out)
	}
	port := freePort(t)
	out, err := exec.Command(helm, "template", "stasis", "../deploy/helm/stasis", "--namespace", "stasis-system",
		"--set", "store.location="+store,
		"--set", "stasisd.dataDir="+d.data,
		"--set", "stasisd.socketDir="+filepath.Dir(d.socket),
		"--set", "stasisd.runscStateDir="+filepath.Join(d.data, "runsc"),
		"--set", "stasisd.runsc="+runsc,
		"--set", "stasisd.cni.confDir="+cni,
		// The test actors' bundles are made under the temporary folder.
		"--set", "stasisd.hostPaths[0]="+os.TempDir(),
		"--set", fmt.Sprintf("metrics.port=%d", port),
	).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	ds, svc := renderedNode(t, out)

	pod := ds.Spec.Template.Spec
	if !pod.HostNetwork || !pod.HostPID {
		t.Fatalf("the node pod is on the host's network %v and PID namespace %v: both are needed", pod.HostNetwork, pod.HostPID)
	}
	stasisdC, agentC := container(t, pod, "stasisd"), container(t, pod, "agent")
	if stasisdC.Image != agentC.Image {
		t.Fatalf("the agent runs from %s, stasisd from %s: the agent's fence needs the runsc of stasisd's image", agentC.Image, stasisdC.Image)
	}
	if got := flagValue(agentC.Args, "socket"); got != d.socket || flagValue(stasisdC.Args, "socket") != d.socket {
		t.Fatalf("the agent's socket is %q, stasisd's %q: both should be %s", got, flagValue(stasisdC.Args, "socket"), d.socket)
	}
	// Every host folder is mounted at its own path, and the agent has the
	// socket's folder and runsc's state folder.
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	for _, c := range []corev1.Container{stasisdC, agentC} {
		for _, m := range c.VolumeMounts {
			if p, ok := hostPaths[m.Name]; ok && p != m.MountPath {
				t.Errorf("%s mounts the host's %s at %s: the chart's paths are the host's", c.Name, p, m.MountPath)
			}
		}
	}
	for _, want := range []string{filepath.Dir(d.socket), flagValue(stasisdC.Args, "runsc-root")} {
		if !mounts(agentC, want) {
			t.Errorf("the agent does not mount %s", want)
		}
	}
	if !mounts(stasisdC, store) || !mounts(stasisdC, d.data) || !mounts(stasisdC, os.TempDir()) {
		t.Errorf("stasisd does not mount the store %s, its data %s and the host path %s: %+v", store, d.data, os.TempDir(), stasisdC.VolumeMounts)
	}
	probe := stasisdC.ReadinessProbe
	if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.IntValue() != port || svc.Spec.Ports[0].TargetPort.IntValue() != port {
		t.Fatalf("the readiness probe %+v and the Service %+v do not use the metrics port %d", probe, svc.Spec.Ports, port)
	}

	// stasisd as the kubelet starts it: the image's stasisd is this build.
	if len(stasisdC.Command) != 1 || stasisdC.Command[0] != "/usr/bin/stasisd" {
		t.Fatalf("stasisd's command is %q", stasisdC.Command)
	}
	d.args = expandEnv(t, stasisdC.Args, stasisdC.Env)
	t.Logf("stasisd %s", strings.Join(d.args, " "))
	d.start("")
	d.template("counter", nil)
	d.run("counter", "c1")
	if got := d.counter("c1", "incr"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("counter: %q", got)
	}

	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	if code, body := httpGet(t, http.DefaultClient, url+probe.HTTPGet.Path); code != http.StatusOK || !strings.Contains(body, "store: available "+store) {
		t.Fatalf("%s answers %d %q", probe.HTTPGet.Path, code, body)
	}
	if code, body := httpGet(t, http.DefaultClient, url+"/metrics"); code != http.StatusOK || !regexp.MustCompile(`stasis_actor_state\{actor="c1",[^}]*state="RUNNING"[^}]*\} 1`).MatchString(body) {
		t.Fatalf("/metrics answers %d, no RUNNING c1:\n%s", code, body)
	}
	d.op("Suspend", "c1")
	stored, err := os.ReadDir(store)
	if err != nil || len(stored) == 0 {
		t.Fatalf("the store %s is empty after a suspend (%v)", store, err)
	}
	if got := d.counter(d.op("Resume", "c1").ID, "get"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("counter after the resume: %q", got)
	}
}

// renderedNode finds the node DaemonSet and the metrics Service in a
// rendering.
func renderedNode(t *testing.T, rendering []byte) (appsv1.DaemonSet, corev1.Service) {
	t.Helper()
	var ds appsv1.DaemonSet
	var svc corev1.Service
	found := 0
	for _, u := range yamlObjects(t, rendering) {
		var into any
		switch {
		case u.GetKind() == "DaemonSet" && u.GetName() == "stasis-node":
			into = &ds
		case u.GetKind() == "Service" && u.GetName() == "stasis-node-metrics":
			into = &svc
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into); err != nil {
			t.Fatal(err)
		}
		found++
	}
	if found != 2 {
		t.Fatalf("the rendering has no DaemonSet stasis-node (%q) or no Service stasis-node-metrics (%q)", ds.Name, svc.Name)
	}
	return ds, svc
}

func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("the node pod has no container %s", name)
	return corev1.Container{}
}

// flagValue is the value of --name=VALUE in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func mounts(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// expandEnv expands $(NAME) in args as the kubelet does, from the
// container's environment: a value, or the pod's host address (here
// loopback).
func expandEnv(t *testing.T, args []string, env []corev1.EnvVar) []string {
	t.Helper()
	values := map[string]string{}
	for _, e := range env {
		switch {
		case e.ValueFrom == nil:
			values[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP":
			values[e.Name] = "127.0.0.1"
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = ref.ReplaceAllStringFunc(a, func(m string) string {
			v, ok := values[ref.FindStringSubmatch(m)[1]]
			if !ok {
				t.Fatalf("%s names %s, which the container's environment does not give", a, m)
			}
			return v
		})
	}
	return out
}

// prometheusOperator is the release whose ServiceMonitor CRD the chart's
// ServiceMonitor is checked against (its Go module holds the CRDs).
const prometheusOperator = "github.com/prometheus-operator/prometheus-operator@v0.90.1"

// TestChartServiceMonitor: on a real API server serving the Prometheus
// Operator's ServiceMonitor CRD, the chart's ServiceMonitor (made by its
// default, auto, since the cluster serves the kind) passes the CRD's schema
// with strict field validation and selects the metrics Service, whose port
// it names.
func TestChartServiceMonitor(t *testing.T) {
	helm, err := exec.LookPath("helm")
	if err != nil {
		t.Fatalf("helm is needed: scripts/install-helm.sh (%v)", err)
	}
	out, err := exec.Command("go", "mod", "download", "-json", prometheusOperator).Output()
	if err != nil {
		t.Fatalf("go mod download %s: %v", prometheusOperator, err)
	}
	var module struct{ Dir string }
	if err := json.Unmarshal(out, &module); err != nil || module.Dir == "" {
		t.Fatalf("go mod download %s: %v %s", prometheusOperator, err, out)
	}
	cp := startControlPlane(t)
	ctx := context.Background()
	applyYAML(t, cp.kube, filepath.Join(module.Dir, "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"))
	gvk := schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitorList"}
	waitFor(t, "the ServiceMonitor CRD to serve", func() bool {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk)
		return cp.kube.List(ctx, list) == nil
	})

	rendering, err := exec.Command(helm, "template", "stasis", "../deploy/helm/stasis", "--namespace", "monitoring-test",
		"--set", "store.location=s3://b/p", "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if err := cp.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring-test"}}); err != nil {
		t.Fatal(err)
	}
	var monitor *unstructured.Unstructured
	for _, obj := range yamlObjects(t, rendering) {
		switch {
		case obj.GetKind() == "ServiceMonitor":
			monitor = obj
		case obj.GetKind() == "Service" && obj.GetName() == "stasis-node-metrics":
		default:
			continue
		}
		if err := cp.kube.Create(ctx, obj, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	if monitor == nil {
		t.Fatal("the chart made no ServiceMonitor on a cluster that serves the kind")
	}

	var spec struct {
		Selector  metav1.LabelSelector
		Endpoints []struct{ Port string }
	}
	raw, err := json.Marshal(monitor.Object["spec"])
	if err != nil || json.Unmarshal(raw, &spec) != nil {
		t.Fatalf("the ServiceMonitor's spec: %v %s", err, raw)
	}
	selector, err := metav1.LabelSelectorAsSelector(&spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	var services corev1.ServiceList
	if err := cp.kube.List(ctx, &services, client.InNamespace("monitoring-test"), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		t.Fatal(err)
	}
	if len(services.Items) != 1 || services.Items[0].Name != "stasis-node-metrics" {
		t.Fatalf("the ServiceMonitor selects %d Services, not stasis-node-metrics alone: %+v", len(services.Items), services.Items)
	}
	if len(spec.Endpoints) != 1 || spec.Endpoints[0].Port != services.Items[0].Spec.Ports[0].Name {
		t.Fatalf("the ServiceMonitor scrapes port %+v, the Service has %+v", spec.Endpoints, services.Items[0].Spec.Ports)
	}
}
