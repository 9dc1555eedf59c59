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
)

// TestFailedStartsRetriedWhereTheCauseCanPass: a start that failed for a
// cause that can pass (stasisd unavailable, a deadline, a template not yet
// there) is tried again after a wait that doubles up to retryMax; one that
// cannot work as it stands (refused, damaged data) is not, until the agent
// starts again.
func TestFailedStartsRetriedWhereTheCauseCanPass(t *testing.T) {
	a := &Agent{retries: map[string]retry{}}
	if !a.retryDue("never-failed") {
		t.Fatal("an actor this agent never saw fail is not due")
	}
	transient := errdefs.Mark(errors.New("stasisd: the store is down"), errdefs.ErrUnavailable)
	var waits []string
	for range 9 {
		why := a.failed("t1", transient)
		if a.retryDue("t1") {
			t.Fatalf("due right after failing (%s)", why)
		}
		waits = append(waits, why)
		r := a.retries["t1"]
		r.next = time.Now() // the wait is over
		a.retries["t1"] = r
		if !a.retryDue("t1") {
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
		name := fmt.Sprint(err)
		if why := a.failed(name, err); !strings.Contains(why, "change the Actor's spec") || a.retryDue(name) {
			t.Errorf("%v: %q, due %v; want it left until its spec changes", err, why, a.retryDue(name))
		}
	}
	notYet := apierrors.NewNotFound(schema.GroupResource{Group: "stasis.dev", Resource: "actortemplates"}, "later")
	if why := a.failed("t2", fmt.Errorf("actor template later: %w", notYet)); !strings.HasPrefix(why, "tried again") {
		t.Errorf("a template not created yet: %q; want a retry", why)
	}
}
