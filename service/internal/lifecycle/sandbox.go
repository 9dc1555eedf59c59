package lifecycle

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service/internal/op"
)

// renameSandbox gives an actor whose sandbox an older stasisd named (the
// actor id itself) the id of api.SandboxID before a resume makes its next
// sandbox: the old one is deleted when it is stopped, and a live one is
// refused, as a restore into a live id is. The journal holds the new id
// before any sandbox of it exists, so that a crash finds it.
func (s *Actors) renameSandbox(ctx context.Context, o *op.Operation) error {
	id := api.SandboxID(o.Actor.ID)
	if o.Actor.Sandbox == id {
		return nil
	}
	return o.Step(op.StepRenameSandbox, func() (string, error) {
		st, err := s.engines.Of(o.Actor).Status(ctx, o.Actor.Sandbox)
		if err != nil {
			return "", fmt.Errorf("the sandbox %s that an older stasisd made cannot be checked: %w", o.Actor.Sandbox, err)
		}
		if st != runtime.StatusStopped {
			return "", errdefs.Mark(fmt.Errorf("the sandbox %s that an older stasisd made is %s; delete the actor, or stop that sandbox, first", o.Actor.Sandbox, st), errdefs.ErrFailedPrecondition)
		}
		if err := s.engines.Of(o.Actor).Remove(ctx, o.Actor.ID, o.Actor.Sandbox, o.Observer()); err != nil {
			return "", err
		}
		if err := s.journal.SetActorSandbox(context.WithoutCancel(ctx), o.Actor.ID, id); err != nil {
			return "", err
		}
		old := o.Actor.Sandbox
		o.Actor.Sandbox = id
		return fmt.Sprintf("its sandboxes are now named %s (was %s)", id, old), nil
	})
}
