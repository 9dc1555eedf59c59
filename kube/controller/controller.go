// Package controller is Stasis's fleet controller on Kubernetes (one
// Deployment, leader-elected): it binds Actors to nodes, checking a stored
// snapshot against every node's fingerprint with compat.Place and writing
// the reasons when no node fits; it moves every actor off a draining node
// (suspended to the shared store by that node's agent, resumed on another);
// and when a node's Lease expires it rebinds that node's actors elsewhere,
// to resume from their last stored snapshot. Every decision lives in the
// Actors' status, so a controller that restarts mid-drain carries on.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/compat"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
	"github.com/stasis-run/stasis/snapshot"
	"github.com/stasis-run/stasis/store"
)

// Controller places and moves the actors of one namespace.
type Controller struct {
	Kube client.Client
	// Repo is the shared store, read for the manifests of the snapshots
	// actors resume from.
	Repo           *store.Repository
	Namespace      string
	LeaseNamespace string
	Policy         compat.Policy
	// Interval is how often it looks at every actor (500 ms when zero).
	Interval time.Duration
	Log      *slog.Logger
	// Failpoint, one of the Failpoint… names, stops the controller
	// (SIGSTOP) the first time it gets there: a test hook, to heal a
	// partition at each point of a rebind.
	Failpoint string
	stops     *fleet.Failpoint
	// manifests and lastManifests hold the stored manifests read in this
	// pass and in the one before, by name: a stored snapshot never changes,
	// and an actor waiting to be placed needs its manifest on every pass,
	// but one that no pass needs any more is let go, so the cache stays
	// as small as the actors being placed.
	manifests, lastManifests map[string]*snapshot.Manifest
	// storedNames lists the store's snapshots once in a pass that needs
	// it (nil until then).
	storedNames []string
	// leases judges the nodes' Leases on this controller's clock.
	leases fleet.LeaseClock
	// waits holds, per actor, when an actor that could not be decided on
	// (its template missing, its snapshot's manifest unreadable) is looked
	// at again, and how long it waited last.
	waits map[types.UID]wait
	// endpoints holds, per actor, the Service and EndpointSlice as this
	// controller last wrote them.
	endpoints map[types.UID]endpoints
}

// wait is when an actor is looked at again after a failure, unless its
// spec changes (its generation).
type wait struct {
	next       time.Time
	last       time.Duration
	generation int64
}

// Waits after a failure to decide: the first waitBase, each later one
// twice the one before, up to waitMax.
const (
	waitBase = time.Second
	waitMax  = 30 * time.Second
)

// The points of a rebind (a lost node's actor bound to another) where
// Controller.Failpoint stops the controller.
const (
	// FailpointRevoked: the lost node's epoch is raised; its actors are
	// still bound to it.
	FailpointRevoked = "rebind:revoked"
	// FailpointUnbound: an actor of the lost node is bound to no node.
	FailpointUnbound = "rebind:unbound"
	// FailpointBound: that actor is bound to another node.
	FailpointBound = "rebind:bound"
)

// Run places and moves actors until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.Interval <= 0 {
		c.Interval = 500 * time.Millisecond
	}
	if c.stops == nil {
		// Once for the process: a term after a lost lead stops no more.
		c.stops = &fleet.Failpoint{Point: c.Failpoint, Log: c.Log}
	}
	c.Log.Info("controller leading", "namespace", c.Namespace)
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("pass", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Pass looks at every node and actor once.
func (c *Controller) Pass(ctx context.Context) error {
	c.startPass()
	nodes, err := c.nodes(ctx)
	if err != nil {
		return err
	}
	var actors stasisv1alpha1.ActorList
	if err := c.Kube.List(ctx, &actors, client.InNamespace(c.Namespace)); err != nil {
		return err
	}
	load := map[string]int{}
	for _, a := range actors.Items {
		if a.Status.Node != "" {
			load[a.Status.Node]++
		}
	}
	if c.waits == nil {
		c.waits = map[types.UID]wait{}
	}
	seen := map[types.UID]bool{}
	for i := range actors.Items {
		a := &actors.Items[i]
		seen[a.UID] = true
		if w := c.waits[a.UID]; w.generation == a.Generation && time.Now().Before(w.next) {
			continue
		}
		edit, err := c.decide(ctx, a, nodes, load)
		if err != nil {
			edit = c.refused(a, err)
		} else {
			delete(c.waits, a.UID)
		}
		if edit == nil {
			continue
		}
		before := a.Status.Node
		edit(&a.Status)
		if err := c.Kube.Status().Update(ctx, a); err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				c.Log.Warn("actor status", "actor", a.Name, "err", err)
			}
			continue
		}
		if a.Status.Node != before {
			load[before]--
			load[a.Status.Node]++
			c.Log.Info("bound", "actor", a.Name, "node", a.Status.Node, "from", before, "reason", a.Status.Reason)
			switch {
			case before != "" && nodes[before].Revoked:
				c.stops.Reach(FailpointUnbound)
			case before == "" && a.Status.Placement > 1:
				c.stops.Reach(FailpointBound)
			}
		}
	}
	for uid := range c.waits {
		if !seen[uid] {
			delete(c.waits, uid)
		}
	}
	return c.keepEndpoints(ctx, actors.Items)
}

// refused waits longer before the next look at an actor that could not be
// decided on, and says why in its status (the binding untouched).
func (c *Controller) refused(a *stasisv1alpha1.Actor, err error) func(*stasisv1alpha1.ActorStatus) {
	w := c.waits[a.UID]
	w.last = min(max(2*w.last, waitBase), waitMax)
	w.next, w.generation = time.Now().Add(w.last), a.Generation
	c.waits[a.UID] = w
	c.Log.Info("actor waits", "actor", a.Name, "err", err, "retry", w.last.String())
	reason := fmt.Sprintf("%v; looked at again in %s", err, w.last)
	if a.Status.Node != "" {
		// Bound: the binding stays as it is, the reason says why.
		if a.Status.Reason == reason {
			return nil
		}
		return func(s *stasisv1alpha1.ActorStatus) { s.Reason = reason }
	}
	return func(s *stasisv1alpha1.ActorStatus) { s.Phase, s.Reason = stasisv1alpha1.PhasePending, reason }
}

// decide says how an actor's binding changes, or nil.
func (c *Controller) decide(ctx context.Context, a *stasisv1alpha1.Actor, nodes map[string]fleet.Node, load map[string]int) (func(*stasisv1alpha1.ActorStatus), error) {
	want := a.Spec.Phase
	if want == "" {
		want = stasisv1alpha1.PhaseRunning
	}
	s := a.Status
	if s.Node != "" {
		n, known := nodes[s.Node]
		switch {
		case !known || n.Lost() || s.NodeEpoch < n.Epoch:
			why := fmt.Sprintf("node %s was lost (its lease expired at %s)", s.Node, n.LeaseExpired.Format(time.RFC3339))
			switch {
			case !known:
				why = fmt.Sprintf("node %s is gone", s.Node)
			case n.OutOfService:
				why = fmt.Sprintf("node %s is tainted %s (out of service)", s.Node, fleet.OutOfServiceTaint)
			case !n.Lost():
				why = fmt.Sprintf("its binding to node %s (epoch %d) was revoked when the node was counted lost (epoch %d)", s.Node, s.NodeEpoch, n.Epoch)
			}
			return func(s *stasisv1alpha1.ActorStatus) {
				s.Node, s.Evict, s.Placement = "", false, s.Placement+1
				s.StartFailures, s.RetryAt = 0, nil
				s.Phase, s.Reason = stasisv1alpha1.PhasePending, why+"; it resumes elsewhere from its newest stored snapshot (from its template if it has none)"
			}, nil
		case s.Evict:
			return nil, nil
		case n.Draining && want != stasisv1alpha1.PhaseSuspended:
			return evict(fmt.Sprintf("node %s is draining", s.Node)), nil
		case a.Spec.Node != "" && a.Spec.Node != s.Node && want != stasisv1alpha1.PhaseSuspended:
			return evict(fmt.Sprintf("moving to node %s, as its spec asks", a.Spec.Node)), nil
		}
		return nil, nil
	}
	if want == stasisv1alpha1.PhaseSuspended {
		return nil, nil
	}
	node, reason, from, err := c.place(ctx, a, nodes, load)
	if err != nil {
		return nil, err
	}
	if node == "" {
		if s.Phase == stasisv1alpha1.PhasePending && s.Reason == reason && s.Snapshot == from {
			return nil, nil
		}
		return func(s *stasisv1alpha1.ActorStatus) {
			s.Phase, s.Reason, s.Snapshot = stasisv1alpha1.PhasePending, reason, from
		}, nil
	}
	epoch := nodes[node].Epoch
	return func(s *stasisv1alpha1.ActorStatus) {
		s.Node, s.Evict, s.Placement, s.Snapshot, s.NodeEpoch = node, false, s.Placement+1, from, epoch
		s.StartFailures, s.RetryAt = 0, nil // a new binding starts afresh
		s.Phase, s.Reason = stasisv1alpha1.PhasePending, reason
	}, nil
}

func evict(why string) func(*stasisv1alpha1.ActorStatus) {
	return func(s *stasisv1alpha1.ActorStatus) {
		s.Evict, s.Phase, s.Reason = true, stasisv1alpha1.PhaseMoving, why+": suspending it to the store"
	}
}

// place chooses a node for an unbound actor, or says why none fits, and
// the snapshot its status is to name, which it resumes from ("" for none:
// from its template). An actor
// with a stored snapshot goes where compat.Place ranks that snapshot's
// restore first; a new one to the fitting node with the fewest actors.
func (c *Controller) place(ctx context.Context, a *stasisv1alpha1.Actor, nodes map[string]fleet.Node, load map[string]int) (node, reason, resumeFrom string, err error) {
	var refused []string
	var open []fleet.Node
	for _, name := range sortedKeys(nodes) {
		n := nodes[name]
		switch {
		case a.Spec.Node != "" && name != a.Spec.Node:
		case n.Problem != "":
			refused = append(refused, name+": "+n.Problem)
		case n.OutOfService:
			refused = append(refused, name+": tainted "+fleet.OutOfServiceTaint)
		case !n.Alive:
			refused = append(refused, name+": its lease expired")
		case n.Draining:
			refused = append(refused, name+": draining")
		default:
			open = append(open, n)
		}
	}
	if a.Spec.Node != "" && nodes[a.Spec.Node].Name == "" {
		refused = append(refused, a.Spec.Node+": no such node runs a Stasis agent")
	}
	if len(open) == 0 {
		return "", "no node fits: " + strings.Join(refused, "; "), a.Status.Snapshot, nil
	}
	var t stasisv1alpha1.ActorTemplate
	if err := c.Kube.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.Template}, &t); apierrors.IsNotFound(err) {
		return "", "", "", fmt.Errorf("its ActorTemplate %s does not exist in namespace %s: create it, or name another in spec.template", a.Spec.Template, a.Namespace)
	} else if err != nil {
		return "", "", "", fmt.Errorf("its ActorTemplate %s: %w", a.Spec.Template, err)
	}
	// The snapshot it starts from: its own newest one, else its
	// template's golden one; a node must be able to restore it. An actor
	// that ran before asks the store, not its status: a node may have
	// stored a snapshot its agent never recorded (it hung mid-drain).
	from := a.Status.Snapshot
	if a.Status.Placement > 0 {
		if from, err = c.newestStored(ctx, a); err != nil {
			return "", "", "", fmt.Errorf("the store could not say which is the newest snapshot of the actor, so it is not started anywhere yet: %w", err)
		}
	}
	unrecorded := ""
	if from != a.Status.Snapshot {
		unrecorded = fmt.Sprintf(" (%s is its newest stored snapshot, which its status did not record)", from)
	}
	resumeFrom = from
	if from == "" {
		from = t.Spec.Golden
	}
	if from != "" {
		m, err := c.manifest(ctx, from)
		if err != nil {
			return "", "", "", err
		}
		fps := make([]fingerprint.Fingerprint, len(open))
		for i, n := range open {
			// Results name nodes by the fingerprint's host; in the fleet
			// the node's name is what counts.
			fps[i] = n.Fingerprint
			fps[i].Hostname = n.Name
		}
		best := ""
		for _, r := range compat.Place(m, fps, c.Policy) {
			switch {
			case !r.Compatible:
				refused = append(refused, r.Node+": "+strings.Join(r.Reasons, "; "))
			case best == "" || load[r.Node] < load[best]:
				best = r.Node
			}
		}
		if best == "" {
			return "", "no node can restore " + from + unrecorded + ": " + strings.Join(refused, "; "), resumeFrom, nil
		}
		return best, fmt.Sprintf("placed on %s, which can restore %s%s", best, from, unrecorded), resumeFrom, nil
	}
	gpus := t.Spec.GPUs
	best := ""
	for _, n := range open {
		if rt := t.Spec.Runtime; !n.Fingerprint.Offers(rt) {
			refused = append(refused, fmt.Sprintf("%s: runs no %s actors (%s)", n.Name, rt, offerReason(n.Fingerprint, rt)))
			continue
		}
		// A micro-VM's GPUs are devices its template names, bound to
		// vfio-pci, where the host's NVML does not count them.
		if have := int32(len(n.Fingerprint.GPU.Devices)); have < gpus && t.Spec.Runtime != api.RuntimeMicroVM {
			refused = append(refused, fmt.Sprintf("%s: %d GPU(s), the template needs %d", n.Name, have, gpus))
			continue
		}
		if best == "" || load[n.Name] < load[best] {
			best = n.Name
		}
	}
	if best == "" {
		return "", "no node fits: " + strings.Join(refused, "; "), resumeFrom, nil
	}
	return best, "placed on " + best + ", the fitting node with the fewest actors", resumeFrom, nil
}

// offerReason says why a node's fingerprint does not offer runtime rt.
func offerReason(f fingerprint.Fingerprint, rt string) string {
	for _, o := range f.Runtimes {
		if o.Name == rt {
			return o.Reason
		}
	}
	return "its stasisd does not know it"
}

// startPass lets go of the manifests that the last pass did not ask for,
// and of the store's listing.
func (c *Controller) startPass() {
	c.lastManifests, c.manifests = c.manifests, map[string]*snapshot.Manifest{}
	c.storedNames = nil
}

// newestStored is the snapshot an actor whose node was lost resumes from:
// the newest in the store that the actor itself pushed since its Actor was
// made (the store is the truth; the status a cache of it, which an agent
// that hung between stasisd's suspend and its record of it left behind),
// else the one its status names ("" for none). A stored name is only a
// hint (api.StoredActor): the snapshot's manifest must name the actor too.
// Without a store, the status's.
func (c *Controller) newestStored(ctx context.Context, a *stasisv1alpha1.Actor) (string, error) {
	newest := a.Status.Snapshot
	if c.Repo == nil {
		return newest, nil
	}
	if c.storedNames == nil {
		names, err := c.Repo.Names(ctx)
		if err != nil {
			return "", err
		}
		c.storedNames = names
	}
	var newestAt time.Time
	if actor, ok := api.StoredActor(newest); ok && actor == a.Name {
		if m, err := c.manifest(ctx, newest); err == nil {
			newestAt = m.CreatedAt
		}
	}
	for _, name := range c.storedNames {
		if actor, ok := api.StoredActor(name); !ok || actor != a.Name || name == a.Status.Snapshot {
			continue
		}
		m, err := c.manifest(ctx, name)
		if errors.Is(err, errdefs.ErrCorrupt) {
			c.Log.Warn("a stored snapshot of the actor is damaged, and left out", "actor", a.Name, "snapshot", name, "err", err)
			continue
		}
		if err != nil {
			return "", err
		}
		// An Actor of the same name deleted before this one was made left
		// its snapshots in the store: they are not this one's.
		if m.Actor != a.Name || m.CreatedAt.Before(a.CreationTimestamp.Time) {
			continue
		}
		if m.CreatedAt.After(newestAt) {
			newest, newestAt = name, m.CreatedAt
		}
	}
	return newest, nil
}

// manifest reads a stored snapshot's manifest, once while passes keep
// asking for it; only within a pass (startPass makes its cache).
func (c *Controller) manifest(ctx context.Context, name string) (*snapshot.Manifest, error) {
	if m, ok := c.manifests[name]; ok {
		return m, nil
	}
	if m, ok := c.lastManifests[name]; ok {
		c.manifests[name] = m
		return m, nil
	}
	if c.Repo == nil {
		return nil, fmt.Errorf("snapshot %s: the controller has no store to read its manifest from (--store)", name)
	}
	s, err := c.Repo.Snapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	m := s.Folder()
	c.manifests[name] = m
	return m, nil
}

// nodes reads every Node with its Lease.
func (c *Controller) nodes(ctx context.Context) (map[string]fleet.Node, error) {
	var nodes corev1.NodeList
	if err := c.Kube.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var leases coordinationv1.LeaseList
	if err := c.Kube.List(ctx, &leases, client.InNamespace(c.LeaseNamespace)); err != nil {
		return nil, err
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		byName[leases.Items[i].Name] = &leases.Items[i]
	}
	now := time.Now()
	out := map[string]fleet.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		lease := byName[fleet.LeaseOf(n.Name)]
		if lease == nil && n.Annotations[fleet.FingerprintAnnotation] == "" {
			continue // no Stasis agent has ever run there
		}
		var renewed time.Time
		if lease != nil && lease.Spec.RenewTime != nil {
			renewed = c.leases.Renewed(lease, now)
		}
		node := fleet.ReadNode(n, lease, renewed, now)
		if !node.Alive && !node.LeaseExpired.IsZero() && !node.Revoked {
			node = c.revoke(ctx, lease, node)
		}
		out[n.Name] = node
	}
	return out, nil
}

// revoke raises the epoch of node's expired Lease, a write conditional on
// the Lease as read: it succeeds only if the node has not renewed since,
// and from then on no binding the node's agent read before is acted on
// (ActorStatus.NodeEpoch). The node's actors are moved only once it has.
// A node that renewed meanwhile is alive; one whose Lease could not be
// written is not moved from yet.
func (c *Controller) revoke(ctx context.Context, lease *coordinationv1.Lease, node fleet.Node) fleet.Node {
	revoked := lease.DeepCopy()
	fleet.Revoke(revoked)
	switch err := c.Kube.Update(ctx, revoked); {
	case err == nil:
		node.Epoch, node.Revoked = fleet.Epoch(revoked), true
		c.Log.Info("node lost: its epoch raised, its actors move", "node", node.Name, "epoch", node.Epoch, "leaseExpired", node.LeaseExpired)
		c.stops.Reach(FailpointRevoked)
	case apierrors.IsConflict(err):
		node.Alive, node.LeaseExpired = true, time.Time{} // it renewed meanwhile
	default:
		c.Log.Warn("a lost node's lease could not be revoked; its actors stay until it is", "node", node.Name, "err", err)
	}
	return node
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
