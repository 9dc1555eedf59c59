// Package agent is Stasis's node agent on Kubernetes: beside one node's
// stasisd, it publishes the node's fingerprint (an annotation and labels on
// its Node, NVIDIA GPU Feature Discovery's names where they exist) and a
// Lease, and drives the Actors bound to its node through that stasisd,
// writing their status. It runs an actor only while the actor is bound to
// its node: a copy of one bound elsewhere (the node was drained, or lost
// and came back) is removed without running, before the agent first renews
// its Lease.
//
// The fence does not rest on the agent: after each renewal of its Lease the
// agent renews stasisd's own fleet lease (api.LeaseRequest) until three
// quarters of the Lease's duration, and stasisd freezes the node's fleet
// actors when that lapses, whether the agent hung, died or lost the API
// server. The Lease is renewed only while stasisd answers, so that a node
// whose stasisd is dead or hung is counted lost; its actors' status says
// so, and the agent freezes their sandboxes itself with the commands
// stasisd gave it, as stasisd cannot.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/fencefile"
	"github.com/stasis-run/stasis/internal/tick"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// Agent is one node's agent.
type Agent struct {
	Kube client.Client
	// LeaseKube renews the node's Lease and lists the actors bound here
	// for stasisd's fleet lease (Kube when nil). A client of its own keeps
	// the renewals out of the queue of the passes' requests, which
	// client-side throttling can hold back for seconds.
	LeaseKube client.Client
	// Watched reads the Actors bound to this node and the ActorTemplates
	// from watches (an informer's cache), so that a pass at rest asks the
	// API server nothing, however many actors the node holds (Kube when
	// nil). What the agent acts on is read again through Kube first, and
	// every write goes through Kube.
	Watched client.Reader
	Stasisd *api.Client
	Node    string
	// Namespace holds the Actors, ActorTemplates and Snapshots it serves.
	Namespace      string
	LeaseNamespace string
	LeaseDuration  time.Duration
	// Interval is how often it looks at every actor (1 s when zero).
	Interval time.Duration
	// Workers bounds the actors acted on at once (8 when zero).
	Workers int
	Log     *slog.Logger
	// ClockOffset is added to the times the agent writes in its Lease: the
	// tests' way to give one node a clock that runs ahead or behind, which
	// must not change when it counts as lost.
	ClockOffset time.Duration
	// Address is where this node's published ports are reached, written
	// in its actors' endpoints; the Node's InternalIP (or ExternalIP) when
	// empty.
	Address string
	// Wake, when set, starts a pass at once rather than at the next
	// Interval (ReleaseAsked makes one from the watch): a drain's
	// evictions are handed to stasisd as they are made, not up to an
	// Interval later, when the agent may have hung.
	Wake <-chan struct{}
	// Failpoint, one of the Failpoint… names, makes the agent stop itself
	// (SIGSTOP) the first time it gets there, as a hung agent would: the
	// tests' way into the windows between the steps of a release.
	Failpoint string

	// fingerprint is this node's, read from stasisd once at the start:
	// published on the Node, and its class carried by the Snapshots the
	// agent records.
	fingerprint fingerprint.Fingerprint

	mu sync.Mutex
	// leaseUntil is when the Lease lapses in the controller's eyes: the
	// RenewTime of the last renewal that succeeded plus its duration (zero
	// before the first).
	leaseUntil time.Time
	// fleetUntil is when stasisd's fleet lease, as last renewed, lapses;
	// fencedFor is the fleetUntil the agent last fenced for itself.
	fleetUntil, fencedFor time.Time
	// fenceCommands freeze the sandboxes of the fleet actors that may
	// run, as stasisd last said (api.Lease).
	fenceCommands [][]string
	// epoch is the node's epoch (fleet.EpochAnnotation) in the Lease as
	// last renewed: only bindings of it are acted on.
	epoch int64
	// stasisdDown is what the last look at stasisd found wrong, and
	// reported what the actors' status says of it.
	stasisdDown, reported error
	// staged holds, per golden snapshot, whether stasisd staged it.
	staged map[string]staging
	// stops is the Failpoint's.
	stops *fleet.Failpoint
	// outOfService: this node's Node, as the last renewal read it, is
	// tainted fleet.OutOfServiceTaint: it runs none of its actors.
	outOfService bool
	// releases holds the actors whose release a pass handed to stasisd
	// and that has not ended: the passes go on beside them (released
	// waits for them as the agent stops).
	releases map[string]bool
	released sync.WaitGroup
}

// The points of a release (a drain's or a move's suspend to the store)
// where Agent.Failpoint stops the agent.
const (
	// FailpointSuspended: stasisd suspended the actor and stored its
	// snapshot; nothing of it is recorded in the cluster yet.
	FailpointSuspended = "release:suspended"
	// FailpointRecorded: the Snapshot object is made; the Actor is still
	// bound here.
	FailpointRecorded = "release:recorded"
	// FailpointUnbound: the Actor is bound nowhere, its status naming the
	// snapshot; this node's copy is still here.
	FailpointUnbound = "release:unbound"
)

// Run fences, publishes and serves until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	if a.LeaseDuration <= 0 {
		a.LeaseDuration = fleet.DefaultLeaseDuration
	}
	if a.Interval <= 0 {
		a.Interval = time.Second
	}
	if a.Workers <= 0 {
		a.Workers = 8
	}
	if a.LeaseKube == nil {
		a.LeaseKube = a.Kube
	}
	a.staged = map[string]staging{}
	a.stops = &fleet.Failpoint{Point: a.Failpoint, Log: a.Log}
	var err error
	if a.fingerprint, err = a.Stasisd.NodeInfo(ctx); err != nil {
		return fmt.Errorf("this node's fingerprint from stasisd: %w", err)
	}
	// The fence comes first: until it has run, this node holds no live
	// lease, so nothing is placed here, and nothing bound elsewhere runs.
	// Serving starts once the lease is taken.
	if err := a.pass(ctx, false); err != nil {
		return fmt.Errorf("first pass over the actors: %w", err)
	}
	if err := a.publish(ctx); err != nil {
		return err
	}
	a.Log.Info("agent serving", "node", a.Node, "namespace", a.Namespace)
	// The lease is renewed on its own, so that a long pass (a drain
	// suspends many actors) never lets it lapse; and checked on its own, so
	// that a renewal or a pass slowed or stuck on an unreachable API server
	// never keeps the actors running past it.
	tick.Every(ctx, a.LeaseDuration/3, func() {
		if err := a.renew(ctx); err != nil && ctx.Err() == nil {
			a.Log.Warn("lease not renewed", "err", err)
		}
	})
	tick.Every(ctx, a.LeaseDuration/10, func() { a.fenceWithoutStasisd(ctx) })
	// Golden snapshots are staged beside the passes, never holding one up.
	tick.Every(ctx, a.Interval, func() { a.stageGoldens(ctx) })
	stop := tick.EveryOr(ctx, a.Interval, a.Wake, func() {
		if err := a.pass(ctx, true); err != nil && ctx.Err() == nil {
			a.Log.Warn("pass over the actors", "err", err)
		}
	})
	<-ctx.Done()
	stop() // the pass in flight ends first
	a.released.Wait()
	return nil
}

// publish writes the node's fingerprint and labels on its Node, then takes
// its Lease.
func (a *Agent) publish(ctx context.Context) error {
	f := a.fingerprint
	raw, err := fleet.FingerprintJSON(f)
	if err != nil {
		return err
	}
	var node corev1.Node
	if err := a.Kube.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
		return fmt.Errorf("node %s: %w (the agent publishes on the Node object its kubelet registered)", a.Node, err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Annotations[fleet.FingerprintAnnotation] = raw
	for _, l := range append(f.Labels(), f.GFDLabels()...) {
		node.Labels[l.Key] = l.Value
	}
	if err := a.Kube.Patch(ctx, &node, patch); err != nil {
		return fmt.Errorf("publish the fingerprint on node %s: %w", a.Node, err)
	}
	if a.Address == "" {
		a.Address = nodeAddress(&node)
	}
	return a.renew(ctx)
}

// renew takes or renews the node's Lease, giving up after the Lease's
// duration: a renewal that slow would renew nothing, and one stuck on an
// unreachable API server must not hold back the next. The Lease is renewed
// only while stasisd answers, and stasisd's fleet lease after it.
func (a *Agent) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.LeaseDuration)
	defer cancel()
	start := time.Now()
	err := a.lookAtStasisd(ctx)
	a.reportStasisd(ctx)
	if err != nil {
		return fmt.Errorf("stasisd does not answer, so this node's lease is not renewed: %w", err)
	}
	if err := a.renewLease(ctx, start); err != nil {
		return err
	}
	if out, err := a.readOutOfService(ctx); err != nil || out {
		// An operator said this node is down (or its Node cannot be
		// read): stasisd's fleet lease is left to lapse, so that what
		// the pass has not removed yet is frozen.
		return err
	}
	return a.renewFleetLease(ctx, start)
}

// readOutOfService reads whether this node's Node is tainted out of
// service, and keeps it for the passes; one read a renewal.
func (a *Agent) readOutOfService(ctx context.Context) (bool, error) {
	var node corev1.Node
	if err := a.Kube.Get(ctx, types.NamespacedName{Name: a.Node}, &node); err != nil {
		return false, fmt.Errorf("node %s, for its out-of-service taint: %w", a.Node, err)
	}
	out := fleet.OutOfService(&node)
	a.mu.Lock()
	if out && !a.outOfService {
		a.Log.Warn("this node is tainted out of service: it runs none of its actors, and its copies are removed", "taint", fleet.OutOfServiceTaint)
	}
	a.outOfService = out
	a.mu.Unlock()
	return out, nil
}

// renewLease takes or renews the node's Lease, from start.
func (a *Agent) renewLease(ctx context.Context, start time.Time) error {
	now := metav1.NewMicroTime(start.Add(a.ClockOffset))
	secs := int32(a.LeaseDuration / time.Second)
	var lease coordinationv1.Lease
	renewed := func(err error) error {
		if err == nil {
			a.mu.Lock()
			// The pass may renew beside the ticker: the later start counts.
			if until := start.Add(time.Duration(secs) * time.Second); until.After(a.leaseUntil) {
				a.leaseUntil = until
			}
			// The renewal is a write conditional on the Lease as read: the
			// epoch it carries is the node's now.
			a.epoch = fleet.Epoch(&lease)
			a.mu.Unlock()
		}
		return err
	}
	err := a.LeaseKube.Get(ctx, types.NamespacedName{Namespace: a.LeaseNamespace, Name: fleet.LeaseOf(a.Node)}, &lease)
	if apierrors.IsNotFound(err) {
		lease = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: a.LeaseNamespace, Name: fleet.LeaseOf(a.Node)},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &a.Node, LeaseDurationSeconds: &secs, RenewTime: &now, AcquireTime: &now},
		}
		return renewed(a.LeaseKube.Create(ctx, &lease))
	}
	if err != nil {
		return err
	}
	lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &a.Node, &secs, &now
	return renewed(a.LeaseKube.Update(ctx, &lease))
}

// renewFleetLease renews stasisd's fleet lease after a renewal of the
// node's Lease from start: until three quarters of the Lease's duration
// (the quarter left is for the fence, and covers a small clock skew with
// the controller), binding here the actors the API server now says are
// bound here.
func (a *Agent) renewFleetLease(ctx context.Context, start time.Time) error {
	// Read from the API server, not the watch: the list stasisd thaws by
	// is as new as the renewal itself. Only this node's are sent.
	var list stasisv1alpha1.ActorList
	if err := a.LeaseKube.List(ctx, &list, client.InNamespace(a.Namespace), client.MatchingFields{fleet.NodeField: a.Node}); err != nil {
		return fmt.Errorf("the actors bound here, for stasisd's fleet lease: %w", err)
	}
	// One read of the epoch serves the list and the request, so that a
	// renewal beside this one cannot send bindings of one epoch as another's.
	a.mu.Lock()
	epoch := a.epoch
	a.mu.Unlock()
	var bound []string
	for i := range list.Items {
		if a.boundIn(&list.Items[i], epoch) {
			bound = append(bound, list.Items[i].Name)
		}
	}
	until := start.Add(a.LeaseDuration - a.LeaseDuration/4)
	validFor := time.Until(until)
	if validFor <= 0 {
		return fmt.Errorf("the renewal took %s, past the fleet lease it would renew", time.Since(start).Round(time.Millisecond))
	}
	l, err := a.Stasisd.RenewLease(ctx, api.LeaseRequest{Holder: "stasis-kube agent of node " + a.Node, ValidForSeconds: validFor.Seconds(), Bound: bound, Epoch: epoch})
	if err != nil {
		return fmt.Errorf("renew stasisd's fleet lease: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if until.After(a.fleetUntil) {
		a.fleetUntil = until
	}
	a.fenceCommands = l.FenceCommands
	return nil
}

// lookAtStasisd asks stasisd where its fleet lease stands, within a sixth
// of the Lease's duration, and keeps its fence commands; the error says
// why it does not answer.
func (a *Agent) lookAtStasisd(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.LeaseDuration/6)
	defer cancel()
	l, err := a.Stasisd.Lease(ctx)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stasisdDown = err
	if err == nil {
		a.fenceCommands = l.FenceCommands
	}
	return err
}

// reportStasisd writes, when it changed, whether stasisd answers into the
// status of every actor bound here.
func (a *Agent) reportStasisd(ctx context.Context) {
	a.mu.Lock()
	down, reported := a.stasisdDown, a.reported
	a.mu.Unlock()
	if (down == nil) == (reported == nil) && (down == nil || down.Error() == reported.Error()) {
		return
	}
	var list stasisv1alpha1.ActorList
	if err := a.watched().List(ctx, &list, client.InNamespace(a.Namespace)); err != nil {
		return // the next renewal tries again
	}
	for i := range list.Items {
		actor := &list.Items[i]
		if actor.Status.Node != a.Node {
			continue
		}
		if err := a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) { a.stasisdCondition(s) }); err != nil {
			a.Log.Warn("actor status", "actor", actor.Name, "err", err)
			return
		}
	}
	a.mu.Lock()
	a.reported = down
	a.mu.Unlock()
	if down != nil {
		a.Log.Warn("stasisd does not answer: this node's lease is not renewed, and its actors move elsewhere when it lapses", "err", down)
	} else {
		a.Log.Info("stasisd answers again")
	}
}

// stasisdCondition sets the StasisdAvailable condition, and while stasisd
// does not answer the reason, in s.
func (a *Agent) stasisdCondition(s *stasisv1alpha1.ActorStatus) {
	a.mu.Lock()
	down := a.stasisdDown
	a.mu.Unlock()
	c := metav1.Condition{Type: stasisv1alpha1.ConditionStasisd, Status: metav1.ConditionTrue, Reason: "Answers", Message: "stasisd on node " + a.Node + " answers"}
	if down != nil {
		c = metav1.Condition{Type: stasisv1alpha1.ConditionStasisd, Status: metav1.ConditionFalse, Reason: "DoesNotAnswer",
			Message: fmt.Sprintf("stasisd on node %s does not answer (%v): the node's lease is no longer renewed, and the actor is started on another node when it lapses", a.Node, down)}
		s.Reason = c.Message
	}
	meta.SetStatusCondition(&s.Conditions, c)
}

// fenceWithoutStasisd freezes the sandboxes of the fleet actors that may
// run here, with the commands stasisd gave, once stasisd's fleet lease has
// lapsed while stasisd does not answer (killed, hung): stasisd would have
// fenced them itself. It runs once per lapse.
func (a *Agent) fenceWithoutStasisd(ctx context.Context) {
	a.mu.Lock()
	until, fenced := a.fleetUntil, a.fencedFor
	a.mu.Unlock()
	if until.IsZero() || !fenced.Before(until) {
		return
	}
	err := a.lookAtStasisd(ctx)
	if err == nil || time.Now().Before(until) {
		return
	}
	a.mu.Lock()
	cmds := a.fenceCommands
	a.fencedFor = until
	a.mu.Unlock()
	a.Log.Warn("stasisd's fleet lease lapsed while stasisd does not answer: freezing its fleet actors' sandboxes here", "sandboxes", len(cmds), "err", err)
	fencefile.Run(ctx, cmds, a.Log)
}

// boundHere says whether actor is bound to this node in the node's current
// epoch: a binding of an older one (read a moment before the controller
// counted the node lost and raised its epoch) is never run or thawed; the
// controller moves the actor.
func (a *Agent) boundHere(actor *stasisv1alpha1.Actor) bool {
	a.mu.Lock()
	epoch := a.epoch
	a.mu.Unlock()
	return a.boundIn(actor, epoch)
}

// boundIn says whether actor is bound to this node in epoch.
func (a *Agent) boundIn(actor *stasisv1alpha1.Actor, epoch int64) bool {
	return actor.Status.Node == a.Node && actor.Status.NodeEpoch == epoch
}

// leaseLapsing says whether the Lease, once taken, is in the last quarter
// of its duration without a renewal: the controller may soon count the
// node lost and bind its actors elsewhere, and stasisd's fleet lease, which
// ends where the quarter begins, has lapsed. The quarter (3.75 s of the
// default 15 s) leaves time to fence them, and covers a small clock skew
// between this node and the controller's.
func (a *Agent) leaseLapsing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.leaseUntil.IsZero() && time.Now().After(a.leaseUntil.Add(-a.LeaseDuration/4))
}

// fleetActors keeps the local actors that can be copies of Actors: those
// whose ID is a Kubernetes object name (api.FleetActorID, which stasisd's
// fleet lease covers too). The rest (the actor warming a template, one made
// by hand on the node) are none of the agent's.
func fleetActors(local []api.Actor) []api.Actor {
	var out []api.Actor
	for _, l := range local {
		if api.FleetActorID(l.ID) {
			out = append(out, l)
		}
	}
	return out
}

// pass looks at every Actor of the namespace and every actor of the local
// stasisd once, acting on up to Workers at a time: it removes the copies of
// actors not bound here and, with serve, brings those bound here to what
// their spec asks. Releases are handed on and not waited for (release).
func (a *Agent) pass(ctx context.Context, serve bool) error {
	// Nothing is run or resumed here on a Lease about to lapse: it is
	// renewed first, or the actors stay as they are (fenced by stasisd).
	if serve && a.leaseLapsing() {
		if err := a.renew(ctx); err != nil {
			return fmt.Errorf("this node's lease lapses and could not be renewed, so nothing is started here: %w", err)
		}
	}
	var list stasisv1alpha1.ActorList
	if err := a.watched().List(ctx, &list, client.InNamespace(a.Namespace)); err != nil {
		return err
	}
	local, err := a.Stasisd.ListActors(ctx)
	if err != nil {
		return fmt.Errorf("stasisd's actors: %w", err)
	}
	here := map[string]api.Actor{}
	for _, l := range fleetActors(local) {
		here[l.ID] = l
	}
	a.mu.Lock()
	outOfService := a.outOfService
	a.mu.Unlock()
	names := map[string]bool{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, a.Workers)
	// do runs fn for actor name, at most Workers at a time.
	do := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a.logFailure(ctx, name, fn(ctx))
		}()
	}
	for i := range list.Items {
		actor := &list.Items[i]
		if actor.Status.Node != a.Node {
			// The watch of this node's actors holds none such; a plain
			// listing does. A copy of one is seen to below.
			continue
		}
		l, ok := here[actor.Name]
		if outOfService {
			// An operator's word that this node is down: its actors run
			// elsewhere, or will; nothing of them here (removed below).
			continue
		}
		names[actor.Name] = true
		if !serve || !a.boundHere(actor) {
			// A binding of an older epoch is the controller's to move:
			// neither served nor removed here meanwhile.
			continue
		}
		var lp *api.Actor
		if ok {
			lp = &l
		}
		if releasing(actor) {
			a.release(ctx, actor, lp)
			continue
		}
		do(actor.Name, func(ctx context.Context) error { return a.serve(ctx, actor, lp) })
	}
	for id, l := range here {
		if !names[id] && !a.releaseUnderWay(id) {
			do(id, func(ctx context.Context) error { return a.removeUnbound(ctx, id, l, outOfService) })
		}
	}
	wg.Wait()
	return nil
}

// release hands the release of an Actor bound here (a drain's eviction, a
// suspend its spec asks for) to stasisd, unless one is under way, and does
// not wait for it. Every release a pass sees starts at once, none waiting
// for a worker, and the next pass starts on time beside them, so that an
// eviction the controller makes a moment later is seen a pass later: an
// agent that hangs or dies a moment into a drain leaves every suspend it
// has seen under way in stasisd, which runs each to its end and stores it
// whatever becomes of the agent, and the controller finds them in the
// store.
func (a *Agent) release(ctx context.Context, actor *stasisv1alpha1.Actor, local *api.Actor) {
	a.mu.Lock()
	if a.releases[actor.Name] {
		a.mu.Unlock()
		return
	}
	if a.releases == nil {
		a.releases = map[string]bool{}
	}
	a.releases[actor.Name] = true
	a.mu.Unlock()
	a.released.Add(1)
	go func() {
		defer a.released.Done()
		defer func() {
			a.mu.Lock()
			delete(a.releases, actor.Name)
			a.mu.Unlock()
		}()
		a.logFailure(ctx, actor.Name, a.serve(ctx, actor, local))
	}()
}

// ReleaseAsked is a Wake for the agent: it receives when the watch of
// this node's Actors (the informer of the cache its passes read) shows one
// asked to be released that was not before: evicted, or its spec asking
// for a suspend.
func ReleaseAsked(ctx context.Context, watched cache.Cache) (<-chan struct{}, error) {
	informer, err := watched.GetInformer(ctx, &stasisv1alpha1.Actor{})
	if err != nil {
		return nil, fmt.Errorf("the watch of the Actors: %w", err)
	}
	wake := make(chan struct{}, 1)
	asked := func(actor any) bool {
		a, ok := actor.(*stasisv1alpha1.Actor)
		return ok && releasing(a)
	}
	signal := func() {
		select {
		case wake <- struct{}{}:
		default: // a pass is due already
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if asked(obj) {
				signal()
			}
		},
		UpdateFunc: func(old, obj any) {
			if asked(obj) && !asked(old) {
				signal()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("the watch of the Actors: %w", err)
	}
	return wake, nil
}

// releaseUnderWay says whether a pass handed actor name's release on and
// it has not ended.
func (a *Agent) releaseUnderWay(name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releases[name]
}

// logFailure logs what went wrong serving actor name, unless the agent is
// stopping.
func (a *Agent) logFailure(ctx context.Context, name string, err error) {
	if err != nil && ctx.Err() == nil {
		a.Log.Warn("actor", "actor", name, "err", err)
	}
}

// removeUnbound removes this node's copy of an actor the pass found not
// bound here, once its Actor, read directly, says so: it was deleted, or it
// is bound elsewhere or nowhere; or, outOfService, whatever it says. What
// stasisd stored while this agent could not record it is recorded before
// the copy goes.
func (a *Agent) removeUnbound(ctx context.Context, id string, local api.Actor, outOfService bool) error {
	var actor stasisv1alpha1.Actor
	err := a.Kube.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: id}, &actor)
	switch {
	case apierrors.IsNotFound(err):
		// Its stored snapshots stay in the store.
		return a.fence(ctx, id, "its Actor was deleted")
	case err != nil:
		return err
	case actor.Status.Node == a.Node && !outOfService:
		return nil // bound here: the watch has not shown it yet
	}
	if err := a.recordFinished(ctx, &actor, local); err != nil {
		return err
	}
	why := "it is bound to node " + actor.Status.Node
	switch {
	case outOfService:
		why = "this node is tainted " + fleet.OutOfServiceTaint + ": it runs none of its actors"
	case actor.Status.Node == "":
		why = "it is bound to no node"
	}
	return a.fence(ctx, id, why)
}

// watched is where the passes read the actors bound here and the
// templates: the watches' cache, else the API server.
func (a *Agent) watched() client.Reader {
	if a.Watched != nil {
		return a.Watched
	}
	return a.Kube
}

// fence removes this node's copy of an actor that is not bound here,
// without running it; its stored snapshots stay.
func (a *Agent) fence(ctx context.Context, id, why string) error {
	a.Log.Info("removing this node's copy without running it", "actor", id, "why", why)
	return a.remove(ctx, id)
}

// remove deletes this node's copy of an actor (its stored snapshots stay).
func (a *Agent) remove(ctx context.Context, id string) error {
	_, err := a.Stasisd.Delete(ctx, api.DeleteRequest{ID: id})
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// serve brings an actor bound to this node to what its spec asks.
//
// An actor that is as its spec asks is served from the pass's listing: at
// rest a pass costs one list of the actors, whatever their number, and a
// status write only where the status changed. One that needs stasisd to
// act (started, released, paused, resumed) is read again first, so that no
// action rests on a listing a moment old.
func (a *Agent) serve(ctx context.Context, listed *stasisv1alpha1.Actor, local *api.Actor) error {
	name := listed.Name
	want := wanted(listed)
	if local != nil && local.State == api.Crashed && startFailedHere(listed) {
		// A start here that failed for a reason that may pass (its probe
		// timed out on a loaded node) left its copy CRASHED: when its retry
		// is due the copy goes and the start is tried again, from what the
		// store holds; until then the status says when.
		if !retryDue(listed, time.Now()) {
			return nil
		}
		a.Log.Info("trying a failed start again", "actor", name, "reason", local.Reason)
		if err := a.remove(ctx, name); err != nil {
			return err
		}
		local = nil
	}
	switch {
	case local == nil && !retryDue(listed, time.Now()):
		return nil // it failed here for good, or waits for its retry; a new spec tries again
	case local != nil && !listed.Status.Evict && !acts(want, *local):
		actor := listed.DeepCopy()
		return a.report(ctx, actor, *local)
	}
	var actor stasisv1alpha1.Actor
	if err := a.Kube.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: name}, &actor); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !a.boundHere(&actor) {
		return nil // rebound meanwhile, or its node's epoch raised; the next pass sees to it
	}
	want = wanted(&actor)
	if local != nil && local.State == api.Fenced {
		return a.report(ctx, &actor, *local) // not released while frozen
	}
	if releasing(&actor) {
		return a.releaseToStore(ctx, &actor, local, want)
	}
	if local == nil {
		if !retryDue(&actor, time.Now()) {
			return nil // it failed here for good, or waits for its retry; a new spec tries again
		}
		started, err := a.start(ctx, &actor)
		if err != nil {
			return a.setStatus(ctx, &actor, func(s *stasisv1alpha1.ActorStatus) {
				why := startFailed(s, err, time.Now())
				s.Phase, s.Reason = stasisv1alpha1.PhaseFailed, fmt.Sprintf("node %s could not start it: %v; %s", a.Node, err, why)
			})
		}
		local = &started
	}
	var err error
	switch {
	case want == stasisv1alpha1.PhasePaused && local.State == api.Running:
		*local, err = a.Stasisd.Pause(ctx, api.OpRequest{ID: name})
	case want == stasisv1alpha1.PhaseRunning && acts(want, *local):
		*local, err = a.Stasisd.Resume(ctx, api.OpRequest{ID: name})
	}
	if err != nil {
		return a.setStatus(ctx, &actor, func(s *stasisv1alpha1.ActorStatus) { s.Reason = err.Error() })
	}
	return a.report(ctx, &actor, *local)
}

// releasing says whether an Actor is to be released from its node to the
// store: evicted (a drain, a move), or suspended by its spec.
func releasing(actor *stasisv1alpha1.Actor) bool {
	return actor.Status.Evict || wanted(actor) == stasisv1alpha1.PhaseSuspended
}

// wanted is the phase an Actor's spec asks for.
func wanted(actor *stasisv1alpha1.Actor) stasisv1alpha1.Phase {
	if actor.Spec.Phase == "" {
		return stasisv1alpha1.PhaseRunning
	}
	return actor.Spec.Phase
}

// acts says whether an actor bound here, as stasisd has it, needs
// stasisd to act for the phase want: a release, a pause or a resume. A
// FENCED one waits for stasisd to thaw it.
func acts(want stasisv1alpha1.Phase, local api.Actor) bool {
	switch {
	case local.State == api.Fenced:
		return false
	case want == stasisv1alpha1.PhaseSuspended:
		return true
	case want == stasisv1alpha1.PhasePaused:
		return local.State == api.Running
	}
	// Paused or suspended by its idle policy, it runs as asked: the next
	// connection wakes it.
	return (local.State == api.Paused || local.State == api.Suspended) && !local.Idle
}

// report writes what stasisd says of the actor into its status, where it
// changed.
func (a *Agent) report(ctx context.Context, actor *stasisv1alpha1.Actor, local api.Actor) error {
	return a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) {
		if local.State == api.Fenced {
			// stasisd froze it when its fleet lease lapsed; the renewal
			// that binds it here thaws it.
			s.Phase, s.Reason = stasisv1alpha1.PhaseFenced, local.Reason
			a.stasisdCondition(s)
			return
		}
		s.Phase, s.Reason, s.Idle = phaseOf(local.State), local.Reason, local.Idle
		if local.State != api.Crashed {
			s.StartFailures, s.RetryAt = 0, nil // it started
		}
		if local.Snapshot != nil && local.Snapshot.Stored != "" {
			s.Snapshot = local.Snapshot.Stored
		}
		s.Endpoint = a.endpoint(actor.Name, local)
		a.stasisdCondition(s)
	})
}

// Retries of failed starts: the first after retryBase, each later one
// after twice the wait before, up to retryMax.
const (
	retryBase = 2 * time.Second
	retryMax  = 2 * time.Minute
)

// retryable says whether a failed start may work when tried again: when
// its cause can pass (stasisd or the store unavailable, a deadline, a
// node short of room, a template not yet created), not when the request
// cannot work on this node as it stands (a snapshot this node cannot
// restore, a refused or malformed request, data that is damaged).
func retryable(err error) bool {
	if apierrors.IsNotFound(err) {
		return true
	}
	for _, permanent := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrFailedPrecondition, errdefs.ErrPermissionDenied, errdefs.ErrCorrupt} {
		if errors.Is(err, permanent) {
			return false
		}
	}
	return true
}

// startFailed records a failed start in an actor's status and says what
// comes of it, for its reason.
func startFailed(s *stasisv1alpha1.ActorStatus, err error, now time.Time) string {
	s.StartFailures++
	if !retryable(err) {
		s.RetryAt = nil
		return "change the Actor's spec to try again"
	}
	wait := min(retryBase<<min(s.StartFailures-1, 16), retryMax)
	s.RetryAt = &metav1.Time{Time: now.Add(wait)}
	return fmt.Sprintf("tried again in %s (failure %d)", wait, s.StartFailures)
}

// startFailedHere says whether the actor's start on its node failed for
// a reason that may pass, and is to be tried again.
func startFailedHere(actor *stasisv1alpha1.Actor) bool {
	return actor.Status.StartFailures > 0 && actor.Status.RetryAt != nil
}

// retryDue says whether the actor may be started on its node now: no start
// of it failed there, its spec changed since, or its retry is due. A
// failure a retry cannot mend waits for a new spec (or binding).
func retryDue(actor *stasisv1alpha1.Actor, now time.Time) bool {
	s := actor.Status
	switch {
	case s.StartFailures == 0 || s.ObservedGeneration != actor.Generation:
		return true
	case s.RetryAt == nil:
		return false
	}
	return !now.Before(s.RetryAt.Time)
}

// start runs the actor on this node's stasisd: from its last stored
// snapshot when it has one, else from its template's golden snapshot in
// the store when it has one, else from the template (booted, or from a
// golden snapshot of this node's own).
func (a *Agent) start(ctx context.Context, actor *stasisv1alpha1.Actor) (api.Actor, error) {
	a.Log.Info("starting", "actor", actor.Name, "template", actor.Spec.Template, "placement", actor.Status.Placement)
	t, err := a.ensureTemplate(ctx, actor.Spec.Template)
	if err != nil {
		return api.Actor{}, err
	}
	from := actor.Status.Snapshot
	if from == "" {
		from = t.Spec.Golden
	}
	req := api.RunRequest{Template: actor.Spec.Template, ID: actor.Name, FromStored: from,
		RequestID: fmt.Sprintf("%s-%d", actor.UID, actor.Status.Placement)}
	if from != "" {
		a.Log.Info("starting from a stored snapshot", "actor", actor.Name, "fromStored", from)
	}
	return a.Stasisd.Run(ctx, req)
}

// ensureTemplate creates the ActorTemplate on this node's stasisd.
func (a *Agent) ensureTemplate(ctx context.Context, name string) (*stasisv1alpha1.ActorTemplate, error) {
	var t stasisv1alpha1.ActorTemplate
	if err := a.Kube.Get(ctx, types.NamespacedName{Namespace: a.Namespace, Name: name}, &t); err != nil {
		return nil, fmt.Errorf("actor template %s: %w", name, err)
	}
	at := stasisdTemplate(name, t.Spec)
	if _, err := a.Stasisd.CreateTemplate(ctx, at); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return nil, err
	}
	return &t, nil
}

// releaseToStore suspends the actor to the store, records the snapshot,
// gives the binding up and removes this node's copy.
func (a *Agent) releaseToStore(ctx context.Context, actor *stasisv1alpha1.Actor, local *api.Actor, want stasisv1alpha1.Phase) error {
	stored := actor.Status.Snapshot
	if local != nil {
		if local.State != api.Suspended || local.Snapshot == nil || local.Snapshot.Stored == "" {
			// Best effort: the suspend's own result is written below.
			_ = a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) {
				s.Phase, s.Reason = stasisv1alpha1.PhaseMoving, "suspending to the store on node "+a.Node
			})
			suspended, err := a.Stasisd.Suspend(ctx, api.OpRequest{ID: actor.Name, RequestID: fmt.Sprintf("%s-%d-release", actor.UID, actor.Status.Placement)})
			if err != nil {
				return a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) {
					s.Reason = fmt.Sprintf("suspend on node %s failed, the actor stays here: %v", a.Node, err)
				})
			}
			*local = suspended
			a.stops.Reach(FailpointSuspended)
		}
		if local.Snapshot == nil || local.Snapshot.Stored == "" {
			return a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) {
				s.Reason = fmt.Sprintf("suspended on node %s but not stored (%s); the actor stays here", a.Node, local.Reason)
			})
		}
		stored = local.Snapshot.Stored
		if err := a.recordSnapshot(ctx, actor, local.Snapshot); err != nil {
			return err
		}
		a.stops.Reach(FailpointRecorded)
	}
	// The binding is given up before the copy goes: a crash in between
	// leaves a copy the next pass fences, never an actor bound nowhere
	// without its snapshot recorded.
	err := a.setStatus(ctx, actor, func(s *stasisv1alpha1.ActorStatus) {
		s.Node, s.Evict, s.Snapshot, s.Idle = "", false, stored, false
		s.Endpoint = unbound(s.Endpoint)
		s.Phase, s.Reason = stasisv1alpha1.PhasePending, fmt.Sprintf("suspended to the store on node %s as %s; waiting for a node", a.Node, stored)
		if want == stasisv1alpha1.PhaseSuspended {
			s.Phase, s.Reason = stasisv1alpha1.PhaseSuspended, fmt.Sprintf("suspended to the store on node %s as %s", a.Node, stored)
		}
	})
	if err != nil || local == nil {
		return err
	}
	a.stops.Reach(FailpointUnbound)
	a.Log.Info("released to the store", "actor", actor.Name, "snapshot", stored)
	return a.remove(ctx, actor.Name)
}

// recordFinished records the snapshot of a suspend that stasisd finished
// and stored while this agent could not record it (it hung, or was killed,
// between the two): the Snapshot object (made once; a SUSPENDED actor's
// latest snapshot is its own suspend's). The actor's status is the
// controller's to set: it reads the store, which holds this snapshot too,
// before it starts the actor anywhere.
func (a *Agent) recordFinished(ctx context.Context, actor *stasisv1alpha1.Actor, local api.Actor) error {
	snap := local.Snapshot
	if local.State != api.Suspended || snap == nil || snap.Stored == "" {
		return nil
	}
	a.Log.Info("recording a snapshot stasisd stored while this agent could not", "actor", actor.Name, "snapshot", snap.Stored,
		"statusSnapshot", actor.Status.Snapshot, "boundTo", actor.Status.Node)
	return a.recordSnapshot(ctx, actor, snap)
}

// recordSnapshot creates the Snapshot object of a stored snapshot.
func (a *Agent) recordSnapshot(ctx context.Context, actor *stasisv1alpha1.Actor, snap *api.Snapshot) error {
	rec := &stasisv1alpha1.Snapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: objectName(snap.Stored), Labels: map[string]string{"stasis.dev/actor": actor.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: stasisv1alpha1.GroupVersion.String(), Kind: "Actor", Name: actor.Name, UID: actor.UID}}},
		Spec: stasisv1alpha1.SnapshotSpec{StoreName: snap.Stored, Actor: actor.Name, Template: actor.Spec.Template, Kind: string(api.KindCommit),
			Node: a.Node, Class: a.fingerprint.Class(), SizeBytes: snap.SizeBytes},
	}
	if err := a.Kube.Create(ctx, rec); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("record snapshot %s: %w", snap.Stored, err)
	}
	return nil
}

// objectName makes a store name a valid object name: lower case, and dots
// and underscores as dashes where they cannot stand.
func objectName(stored string) string {
	s := strings.ToLower(strings.ReplaceAll(stored, "_", "-"))
	return strings.Trim(s, ".-")
}

// setStatus rewrites the actor's status with edit, on the newest version.
func (a *Agent) setStatus(ctx context.Context, actor *stasisv1alpha1.Actor, edit func(*stasisv1alpha1.ActorStatus)) error {
	for range 5 {
		before := actor.Status.DeepCopy()
		edit(&actor.Status)
		actor.Status.ObservedGeneration = actor.Generation
		if equality.Semantic.DeepEqual(before, &actor.Status) {
			return nil
		}
		err := a.Kube.Status().Update(ctx, actor)
		if !apierrors.IsConflict(err) {
			return err
		}
		if err := a.Kube.Get(ctx, client.ObjectKeyFromObject(actor), actor); err != nil {
			return err
		}
		if actor.Status.Node != a.Node && before.Node == a.Node {
			return errors.New("rebound to node " + actor.Status.Node + " meanwhile")
		}
	}
	return fmt.Errorf("status of %s: too many conflicting writers", actor.Name)
}

// phaseOf maps stasisd's state onto the fleet's phase.
func phaseOf(s api.State) stasisv1alpha1.Phase {
	switch s {
	case api.Running:
		return stasisv1alpha1.PhaseRunning
	case api.Paused:
		return stasisv1alpha1.PhasePaused
	case api.Suspended:
		return stasisv1alpha1.PhaseSuspended
	case api.Crashed, api.Exited:
		return stasisv1alpha1.PhaseFailed
	case api.Fenced:
		return stasisv1alpha1.PhaseFenced
	}
	return stasisv1alpha1.PhasePending
}
