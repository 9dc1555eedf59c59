package agent

import (
	"context"
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stasis-run/stasis/errdefs"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// staging is what the agent knows of staging one golden snapshot on its
// node: done, or when to try again.
type staging struct {
	done  bool
	next  time.Time
	tries int
}

// stageRetry is how long after a refused or failed stage the agent tries
// again: a node's disk frees up, a store comes back; a snapshot this node
// cannot restore is asked about again only this rarely.
func stageRetry(tries int, err error) time.Duration {
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		return 10 * time.Minute
	}
	return min(10*time.Second<<min(tries, 6), 10*time.Minute)
}

// stageGoldens has stasisd stage the golden snapshot of every
// ActorTemplate that names one, one at a time, so that an actor started
// from it on this node reads no store: on a node that has not started one
// yet, the start is as fast as on one that has. stasisd refuses a snapshot
// this node cannot restore, or one that does not fit its budget for staged
// copies (--stage-budget), and fetches nothing then.
func (a *Agent) stageGoldens(ctx context.Context) {
	var list stasisv1alpha1.ActorTemplateList
	if err := a.watched().List(ctx, &list, client.InNamespace(a.Namespace)); err != nil {
		return
	}
	for _, t := range list.Items {
		golden := t.Spec.Golden
		a.mu.Lock()
		s := a.staged[golden]
		a.mu.Unlock()
		if golden == "" || s.done || time.Now().Before(s.next) {
			continue
		}
		start := time.Now()
		st, err := a.Stasisd.StageSnapshot(ctx, golden)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.tries++
			s.next = time.Now().Add(stageRetry(s.tries, err))
			a.Log.Info("golden snapshot not staged on this node", "template", t.Name, "snapshot", golden, "err", err, "again", s.next.Format(time.RFC3339))
		} else {
			s.done = true
			a.Log.Info("golden snapshot staged on this node", "template", t.Name, "snapshot", golden, "already", st.Already, "bytes", st.SizeBytes, "took", time.Since(start).String())
		}
		a.mu.Lock()
		a.staged[golden] = s
		a.mu.Unlock()
	}
}
