package service

import (
	"context"
	"fmt"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
)

// renameSandbox gives an actor whose sandbox an older stasisd named (the
// actor id itself) the id of api.SandboxID before a resume makes its next
// sandbox: the old one is deleted when it is stopped, and a live one is
// refused, as a restore into a live id is. The journal holds the new id
// before any sandbox of it exists, so that a crash finds it.
func (s *Service) renameSandbox(ctx context.Context, o *operation) error {
	id := api.SandboxID(o.actor.ID)
	if o.actor.Sandbox == id {
		return nil
	}
	return o.step(StepRenameSandbox, func() (string, error) {
		st, err := s.engineOf(o.actor).Status(ctx, o.actor.Sandbox)
		if err != nil {
			return "", fmt.Errorf("the sandbox %s that an older stasisd made cannot be checked: %w", o.actor.Sandbox, err)
		}
		if st != runtime.StatusStopped {
			return "", errdefs.Mark(fmt.Errorf("the sandbox %s that an older stasisd made is %s; delete the actor, or stop that sandbox, first", o.actor.Sandbox, st), errdefs.ErrFailedPrecondition)
		}
		if err := s.engineOf(o.actor).Remove(ctx, o.actor.ID, o.actor.Sandbox, o.observer()); err != nil {
			return "", err
		}
		if err := s.journal.SetActorSandbox(context.WithoutCancel(ctx), o.actor.ID, id); err != nil {
			return "", err
		}
		old := o.actor.Sandbox
		o.actor.Sandbox = id
		return fmt.Sprintf("its sandboxes are now named %s (was %s)", id, old), nil
	})
}
