// Package fleet is what Stasis's Kubernetes controller and node agents
// agree on: the annotations and labels on Node objects, the per-node Lease,
// and the view of a node they are read into.
package fleet

import (
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/stasis-run/stasis/fingerprint"
	stasisv1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

const (
	// FingerprintAnnotation holds the node's fingerprint as JSON (the
	// output of `stasis node info --json`), which placement checks
	// snapshots against.
	FingerprintAnnotation = "stasis.dev/fingerprint"
	// DrainAnnotation, "true" on a Node, moves every actor off it and
	// places none there (`stasis-kube drain NODE`).
	DrainAnnotation = "stasis.dev/drain"
	// LeasePrefix names a node's Lease: stasis-node-NODE, renewed by its
	// agent. A node whose Lease expired is lost: its actors resume
	// elsewhere, and it removes its copies when it comes back.
	LeasePrefix = "stasis-node-"
	// DefaultLeaseNamespace is where the Leases live.
	DefaultLeaseNamespace = "stasis-system"
	// DefaultLeaseDuration is how long a node counts as alive after its
	// agent last renewed its Lease.
	DefaultLeaseDuration = 15 * time.Second
)

// Scheme holds the types Stasis's controller and agents read and write.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := stasisv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Node is a node as placement sees it.
type Node struct {
	Name        string
	Fingerprint fingerprint.Fingerprint
	// Alive: its Lease was renewed within its duration.
	Alive bool
	// LeaseExpired is when a lost node's Lease ran out.
	LeaseExpired time.Time
	Draining     bool
	// Problem says why the node cannot be placed on, when its
	// fingerprint is missing or unreadable.
	Problem string
}

// ReadNode reads a Node object and its Lease (nil when there is none).
func ReadNode(n *corev1.Node, lease *coordinationv1.Lease, now time.Time) Node {
	out := Node{Name: n.Name, Draining: n.Annotations[DrainAnnotation] == "true"}
	if raw := n.Annotations[FingerprintAnnotation]; raw == "" {
		out.Problem = "its agent has not published a fingerprint (annotation " + FingerprintAnnotation + ")"
	} else if f, err := fingerprint.Parse([]byte(raw)); err != nil {
		out.Problem = fmt.Sprintf("its fingerprint annotation is unreadable: %v", err)
	} else {
		out.Fingerprint = f
	}
	if lease == nil || lease.Spec.RenewTime == nil {
		out.Problem = firstOf(out.Problem, "its agent holds no lease "+LeasePrefix+n.Name)
		return out
	}
	d := DefaultLeaseDuration
	if lease.Spec.LeaseDurationSeconds != nil {
		d = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	expires := lease.Spec.RenewTime.Add(d)
	out.Alive = now.Before(expires)
	if !out.Alive {
		out.LeaseExpired = expires
	}
	return out
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// FingerprintJSON is the annotation's value for f.
func FingerprintJSON(f fingerprint.Fingerprint) (string, error) {
	data, err := json.Marshal(f)
	return string(data), err
}

// LeaseOf is the name of node's Lease.
func LeaseOf(node string) string { return LeasePrefix + node }
