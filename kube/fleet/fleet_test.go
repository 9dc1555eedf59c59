package fleet

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLeaseJudgedOnTheReadersClock: a node whose clock runs an hour
// ahead, or behind, or half a lease either way, is alive exactly while it
// renews and lost one lease duration (on the reader's clock) after it
// stops: the times it writes are never compared with the reader's. Read on
// the node's own timestamps, the one ahead stayed alive for an hour after
// it stopped, and the one behind was lost while it renewed.
func TestLeaseJudgedOnTheReadersClock(t *testing.T) {
	const lease = 15 * time.Second
	secs := int32(lease / time.Second)
	start := time.Now()
	for _, offset := range []time.Duration{time.Hour, -time.Hour, lease / 2, -lease / 2, 0} {
		var clock LeaseClock
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultLeaseNamespace, Name: LeaseOf("n")}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &secs}}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		read := func(now time.Time) Node {
			return ReadNode(n, l, clock.Renewed(l, now), now)
		}
		// The agent renews every third of the lease for a minute; the
		// reader looks every half second.
		now, last := start, start
		for ; now.Before(start.Add(time.Minute)); now = now.Add(500 * time.Millisecond) {
			if now.Sub(start)%(lease/3) == 0 {
				l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(offset)}
				last = now
			}
			if got := read(now); !got.Alive || !got.LeaseExpired.IsZero() {
				t.Fatalf("node clock off by %s: %s into its renewals: %+v; want it alive", offset, now.Sub(start), got)
			}
		}
		// It stops renewing.
		for ; now.Before(last.Add(lease)); now = now.Add(500 * time.Millisecond) {
			if got := read(now); !got.Alive {
				t.Fatalf("node clock off by %s: lost %s after its last renewal, before its lease of %s ran out", offset, now.Sub(last), lease)
			}
		}
		if got := read(now); got.Alive || got.LeaseExpired.IsZero() {
			t.Fatalf("node clock off by %s: %s after its last renewal: %+v; want its lease expired", offset, now.Sub(last), got)
		}
	}
}

// TestOutOfServiceIsLost: the non-graceful shutdown taint makes a node
// lost whatever its Lease says.
func TestOutOfServiceIsLost(t *testing.T) {
	now := time.Now()
	l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: now}}}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: OutOfServiceTaint, Effect: corev1.TaintEffectNoExecute}}}}
	if got := ReadNode(n, l, now, now); got.Alive || !got.Lost() || !got.OutOfService {
		t.Fatalf("a node tainted out of service with a fresh lease: %+v; want it lost", got)
	}
}
