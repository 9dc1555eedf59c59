// Package fleet is what Stasis's Kubernetes controller and node agents
// agree on: the annotations and labels on Node objects, the per-node Lease,
// and the view of a node they are read into.
package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/stasis-run/stasis/fingerprint"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
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
	// EpochAnnotation, on a node's Lease, is the node's epoch: raised by
	// the controller, with a write conditional on the Lease it found
	// expired, before it moves the node's actors. A binding made in an
	// older epoch (ActorStatus.NodeEpoch) is never acted on.
	EpochAnnotation = "stasis.dev/epoch"
	// RevokedAnnotation, on a node's Lease, is the renewal time the
	// controller found expired when it raised the epoch: while the Lease
	// still says that renewal, the node is revoked.
	RevokedAnnotation = "stasis.dev/revoked"
	// NodeField selects the Actors bound to one node (the CRD makes
	// .status.node selectable): what a node's agent watches and renews
	// stasisd's fleet lease for, so that its requests and what it is sent
	// do not grow with the fleet.
	NodeField = "status.node"
)

// Scheme holds the types Stasis's controller and agents read and write.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := stasisv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// OutOfServiceTaint is the Kubernetes non-graceful node shutdown taint: an
// operator's word that the node is down, so its actors are moved at once,
// without waiting for its Lease.
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// OutOfService says whether node n carries OutOfServiceTaint.
func OutOfService(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == OutOfServiceTaint {
			return true
		}
	}
	return false
}

// Node is a node as placement sees it.
type Node struct {
	Name        string
	Fingerprint fingerprint.Fingerprint
	// Alive: its Lease was renewed within its duration, and no operator
	// said it is out of service.
	Alive bool
	// LeaseExpired is when a lost node's Lease ran out.
	LeaseExpired time.Time
	// OutOfService: the node carries OutOfServiceTaint.
	OutOfService bool
	// Epoch is the node's epoch (EpochAnnotation); Revoked says that the
	// controller raised it for the Lease's last renewal, which has not been
	// renewed since.
	Epoch    int64
	Revoked  bool
	Draining bool
	// Problem says why the node cannot be placed on, when its
	// fingerprint is missing or unreadable.
	Problem string
}

// Lost says whether the node's actors are to be moved: an operator said it
// is out of service, or its Lease ran out and the controller revoked it
// (raised its epoch for that lapse, a write that fails if the node renewed
// meanwhile).
func (n Node) Lost() bool { return n.OutOfService || !n.Alive && !n.LeaseExpired.IsZero() && n.Revoked }

// ReadNode reads a Node object and its Lease (nil when there is none),
// whose renewal the reader last saw change at renewed, on its own clock
// (LeaseClock): the time the node wrote in it is never compared with the
// reader's.
func ReadNode(n *corev1.Node, lease *coordinationv1.Lease, renewed, now time.Time) Node {
	out := Node{Name: n.Name, Draining: n.Annotations[DrainAnnotation] == "true", OutOfService: OutOfService(n)}
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
	out.Epoch = Epoch(lease)
	out.Revoked = lease.Annotations[RevokedAnnotation] != "" && lease.Annotations[RevokedAnnotation] == RenewStamp(lease)
	expires := renewed.Add(LeaseDuration(lease))
	out.Alive = now.Before(expires) && !out.OutOfService
	if !now.Before(expires) {
		out.LeaseExpired = expires
	}
	return out
}

// Epoch is the epoch a node's Lease carries (0 without one).
func Epoch(lease *coordinationv1.Lease) int64 {
	n, err := strconv.ParseInt(lease.Annotations[EpochAnnotation], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// RenewStamp is the Lease's renewal time as RevokedAnnotation records it.
func RenewStamp(lease *coordinationv1.Lease) string {
	if lease.Spec.RenewTime == nil {
		return ""
	}
	return lease.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
}

// Revoke raises the epoch of a node's Lease found expired, and marks it
// revoked for its last renewal: the write to make with the Lease as read,
// so that it fails if the node renewed meanwhile.
func Revoke(lease *coordinationv1.Lease) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[EpochAnnotation] = strconv.FormatInt(Epoch(lease)+1, 10)
	lease.Annotations[RevokedAnnotation] = RenewStamp(lease)
}

// LeaseDuration is how long a renewal of lease holds.
func LeaseDuration(lease *coordinationv1.Lease) time.Duration {
	if lease.Spec.LeaseDurationSeconds != nil {
		return time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	return DefaultLeaseDuration
}

// LeaseClock judges Leases on its reader's own clock, as the Kubernetes
// node lifecycle controller reads the kubelet's: a renewal counts from
// when the reader first saw the Lease's renewal time change, never from the
// time the node wrote in it. A node whose clock runs ahead is then not kept
// alive by its own timestamps after it stops renewing, and one whose clock
// runs behind is not counted lost while it renews. A Lease seen for the
// first time counts as renewed then. Not safe for concurrent use.
type LeaseClock struct {
	seen map[string]leaseSeen
}

type leaseSeen struct {
	renew time.Time // the RenewTime written in the Lease
	at    time.Time // when the reader first saw it
}

// Renewed is when, on this clock, lease was last seen renewed.
func (c *LeaseClock) Renewed(lease *coordinationv1.Lease, now time.Time) time.Time {
	if c.seen == nil {
		c.seen = map[string]leaseSeen{}
	}
	key := lease.Namespace + "/" + lease.Name
	last, ok := c.seen[key]
	if !ok || !last.renew.Equal(lease.Spec.RenewTime.Time) {
		last = leaseSeen{renew: lease.Spec.RenewTime.Time, at: now}
		c.seen[key] = last
	}
	return last.at
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
