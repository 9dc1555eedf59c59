package op

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
)

// unsettledEnds holds, by actor, the ends of operations that the journal
// could not record: its disk full past its reserve (a process that fills
// the disk takes the reserve's room as soon as it is given back). Each is
// written again every second until it is, and at once before a new
// operation on its actor, which is refused, saying why, while it cannot
// be. Meanwhile the actor reads as the end left it, never in the
// transitional state the journal still holds; a stasisd that stops before
// an end is written finds the operation running at its next start and
// reconciles it as after any crash.
type unsettledEnds struct {
	mu   sync.Mutex
	ends map[string]journal.End
}

// settleEvery is how often the unsettled ends are written again.
const settleEvery = time.Second

func newUnsettledEnds() *unsettledEnds {
	return &unsettledEnds{ends: map[string]journal.End{}}
}

// add keeps end, which the journal refused, to be written again.
func (u *unsettledEnds) add(end journal.End) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ends[end.Actor] = end
}

// write records actor's unsettled end, if it has one, and says which it
// wrote, or why it could not.
func (u *unsettledEnds) write(ctx context.Context, j *journal.Journal, actor string) (*journal.End, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	end, ok := u.ends[actor]
	if !ok {
		return nil, nil
	}
	if _, err := j.End(ctx, end); err != nil && !errors.Is(err, journal.ErrNotFound) {
		return nil, errdefs.Mark(fmt.Errorf("actor %s: the end of its operation %s is not recorded yet: %w; it is written again every %s, and the actor takes new requests once it is (make room on the journal's disk)",
			actor, end.OpID, err, settleEvery), errdefs.ErrResourceExhausted)
	}
	delete(u.ends, actor)
	return &end, nil
}

// writeAll tries every unsettled end once, and says which it wrote.
func (u *unsettledEnds) writeAll(ctx context.Context, j *journal.Journal) []journal.End {
	u.mu.Lock()
	actors := slices.Collect(maps.Keys(u.ends))
	u.mu.Unlock()
	var written []journal.End
	for _, a := range actors {
		if end, err := u.write(ctx, j, a); end != nil && err == nil {
			written = append(written, *end)
		}
	}
	return written
}

// overlay is rec as its unsettled end, if it has one, left it.
func (u *unsettledEnds) overlay(rec journal.Actor) journal.Actor {
	u.mu.Lock()
	end, ok := u.ends[rec.ID]
	u.mu.Unlock()
	if !ok || rec.Running == nil || rec.Running.ID != end.OpID || end.ActorState == "" {
		return rec
	}
	rec.State, rec.Running = end.ActorState, nil
	rec.Reason = end.Reason + " (not recorded in the journal yet: its disk is full)"
	return rec
}

// writeUnsettled writes the unsettled ends again, once each, saying so for
// those it wrote.
func (r *Runner) writeUnsettled(ctx context.Context) {
	for _, end := range r.unsettled.writeAll(ctx, r.journal) {
		r.cfg.Log.Info("the end of an operation, kept while the journal's disk was full, is recorded", "actor", end.Actor, "operation", end.OpID, "state", end.ActorState)
		r.feed.Notify(end.Actor)
	}
}

// ActorRecord reads an actor's record as it stands: as the end of its last
// operation left it, when the journal could not record that end yet
// (unsettledEnds).
func (r *Runner) ActorRecord(ctx context.Context, id string) (journal.Actor, error) {
	rec, err := r.journal.Actor(ctx, id)
	return r.unsettled.overlay(rec), err
}

// ActorRecords reads every actor's record as it stands (ActorRecord).
func (r *Runner) ActorRecords(ctx context.Context) ([]journal.Actor, error) {
	recs, err := r.journal.Actors(ctx)
	for i := range recs {
		recs[i] = r.unsettled.overlay(recs[i])
	}
	return recs, err
}
