package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/stasis-run/stasis/errdefs"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// TestFailedStartsRetriedWhereTheCauseCanPass: a start that failed for a
// cause that can pass (stasisd unavailable, a deadline, a template not yet
// there) is tried again after a wait that doubles up to retryMax; one that
// cannot work as it stands (refused, damaged data) is not, until its spec
// changes. Both are kept in the actor's status.
func TestFailedStartsRetriedWhereTheCauseCanPass(t *testing.T) {
	now := time.Now()
	actor := &stasisv1alpha1.Actor{}
	if !retryDue(actor, now) {
		t.Fatal("an actor whose start never failed is not due")
	}
	transient := errdefs.Mark(errors.New("stasisd: the store is down"), errdefs.ErrUnavailable)
	var waits []string
	for range 9 {
		why := startFailed(&actor.Status, transient, now)
		if retryDue(actor, now) || !startFailedHere(actor) {
			t.Fatalf("due right after failing (%s), or not a failed start to try again", why)
		}
		waits = append(waits, why)
		now = actor.Status.RetryAt.Time // the wait is over
		if !retryDue(actor, now) {
			t.Fatal("not due once its wait is over")
		}
	}
	if !strings.HasPrefix(waits[0], "tried again in 2s") || !strings.HasPrefix(waits[8], "tried again in 2m0s") || !strings.Contains(waits[8], "failure 9") {
		t.Fatalf("waits: %q", waits)
	}
	for _, err := range []error{
		errdefs.Mark(errors.New("refused"), errdefs.ErrFailedPrecondition),
		errdefs.Mark(errors.New("bad"), errdefs.ErrInvalidArgument),
		errdefs.Mark(errors.New("forbidden"), errdefs.ErrPermissionDenied),
		errdefs.Mark(errors.New("bit rot"), errdefs.ErrCorrupt),
	} {
		permanent := &stasisv1alpha1.Actor{}
		permanent.Generation, permanent.Status.ObservedGeneration = 1, 1
		why := startFailed(&permanent.Status, err, now)
		if !strings.Contains(why, "change the Actor's spec") || retryDue(permanent, now.Add(time.Hour)) || startFailedHere(permanent) {
			t.Errorf("%v: %q, due %v; want it left until its spec changes", err, why, retryDue(permanent, now))
		}
		permanent.Generation++ // a new spec
		if !retryDue(permanent, now) {
			t.Errorf("%v: not due after its spec changed", err)
		}
	}
	notYet := apierrors.NewNotFound(schema.GroupResource{Group: "stasis.dev", Resource: "actortemplates"}, "later")
	if why := startFailed(&stasisv1alpha1.ActorStatus{}, fmt.Errorf("actor template later: %w", notYet), now); !strings.HasPrefix(why, "tried again") {
		t.Errorf("a template not created yet: %q; want a retry", why)
	}
}
