package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/journal"
	"github.com/stasis-run/stasis/network"
	"github.com/stasis-run/stasis/service/internal/op"
	"github.com/stasis-run/stasis/service/internal/ports"
	"github.com/stasis-run/stasis/service/internal/templates"
)

// Networks set actors' networks up and tear them down (network.Manager).
type Networks interface {
	// Fixed says, ok, that every actor has the network of that mode and
	// setting it up makes nothing; Default is the mode of an actor that
	// asks for none.
	Fixed() (mode string, ok bool)
	Default() string
	Check(network.Want) error
	Setup(ctx context.Context, id string, w network.Want, have network.Attachment) (network.Attachment, error)
	Teardown(ctx context.Context, id string, a network.Attachment) error
}

// noNetworks is a stasisd that manages no networks: each sandbox gets what
// its bundle says, and nothing is published.
type noNetworks struct{}

func (noNetworks) Fixed() (string, bool) { return "", true }

func (noNetworks) Default() string { return "" }

func (noNetworks) Check(w network.Want) error {
	if w != (network.Want{}) {
		return fmt.Errorf("%w: this stasisd manages no networks (network mode %q)", errdefs.ErrFailedPrecondition, w.Mode)
	}
	return nil
}

func (noNetworks) Setup(context.Context, string, network.Want, network.Attachment) (network.Attachment, error) {
	return network.Attachment{}, nil
}

func (noNetworks) Teardown(context.Context, string, network.Attachment) error { return nil }

// networkOf is the network a new actor of t gets: the request's mode over
// the template's, the template's ports and the request's, checked.
func (s *Actors) networkOf(t api.Template, req api.RunRequest) (network.Record, error) {
	want := network.Want{Mode: t.Network.Mode, Netns: t.Network.Netns}
	if req.Network.Mode != "" {
		want = network.Want{Mode: req.Network.Mode, Netns: req.Network.Netns}
	}
	if err := templates.CheckPorts(t.Ports, req.Ports); err != nil {
		return network.Record{}, err
	}
	rec := network.Record{Want: want, Ports: slices.Concat(t.Ports, req.Ports)}
	if t.Runtime == api.RuntimeMicroVM {
		if len(req.Ports) > 0 || req.Network != (api.Network{}) {
			return rec, fmt.Errorf("%w: network and ports are for gVisor actors; a micro-VM has none of them yet", errdefs.ErrInvalidArgument)
		}
		return rec, nil
	}
	if err := s.networks.Check(want); err != nil {
		return rec, err
	}
	if mode, ok := s.networks.Fixed(); ok {
		// Known now: nothing to set up, nothing to record later.
		rec.Attachment = network.Attachment{Mode: mode}
	}
	if len(rec.Ports) > 0 {
		switch mode := cmp.Or(want.Mode, s.networks.Default()); mode {
		case network.ModeCNI, network.ModeNetns:
		case "":
			return rec, fmt.Errorf("%w: published ports need a network, and this stasisd manages none", errdefs.ErrFailedPrecondition)
		default:
			return rec, fmt.Errorf("%w: published ports need an address the node reaches: network mode %s has none (use cni, or netns)", errdefs.ErrInvalidArgument, mode)
		}
	}
	return rec, nil
}

// setupNetwork sets the actor's network up, or finds it set up (a resume
// on this node: its address put back where a sandbox took it), and
// records it; the namespace's path is returned for the bundle.
func (s *Actors) setupNetwork(ctx context.Context, o *op.Operation) (network.Attachment, error) {
	rec, err := network.ParseRecord(o.Actor.Network)
	if err != nil {
		return network.Attachment{}, err
	}
	if o.Actor.Runtime == api.RuntimeMicroVM || o.Actor.Network == "" {
		// A micro-VM, or an actor an older stasisd made, whose bundle
		// names no namespace of ours.
		return network.Attachment{}, nil
	}
	if _, ok := s.networks.Fixed(); ok {
		return rec.Attachment, nil
	}
	var att network.Attachment
	err = o.Step(op.StepNetwork, func() (string, error) {
		att, err = s.networks.Setup(ctx, o.Actor.ID, rec.Want, rec.Attachment)
		if err != nil {
			return "", err
		}
		if att != rec.Attachment {
			rec.Attachment = att
			o.Actor.Network = rec.Encode()
			if err := s.journal.SetActorNetwork(context.WithoutCancel(ctx), o.Actor.ID, o.Actor.Network); err != nil {
				return "", err
			}
		}
		msg := "network " + att.Mode
		if att.Address != "" {
			msg += ", address " + att.Address
		}
		return msg, nil
	})
	return att, err
}

// teardownNetwork stops publishing a deleted actor's ports and removes its
// network.
func (s *Actors) teardownNetwork(ctx context.Context, a journal.Actor) error {
	rec, err := network.ParseRecord(a.Network)
	if err != nil {
		return err
	}
	s.ports.Disconnect(a.ID)
	s.ports.Unpublish(a.ID, nil)
	if a.Runtime == api.RuntimeMicroVM {
		return nil
	}
	return s.networks.Teardown(ctx, a.ID, rec.Attachment)
}

// publishAll publishes the recorded ports of every actor, as a stasisd
// that starts does; a port another process took meanwhile is noted in its
// actor's history.
func (s *Actors) publishAll(ctx context.Context) error {
	actors, err := s.journal.Actors(ctx)
	if err != nil {
		return err
	}
	for _, a := range actors {
		rec, err := network.ParseRecord(a.Network)
		if err != nil || len(rec.Ports) == 0 {
			continue
		}
		if _, _, err := s.ports.Publish(a.ID, rec.Ports); err != nil {
			s.runner.Event(a.ID, "", "publish", "its ports could not be published again when stasisd started", 0, err)
		}
	}
	return nil
}

// Target says where actor id stands for a connection to its published
// ports (ports.Config.Target).
func (s *Actors) Target(ctx context.Context, id string) ports.Target {
	a, err := s.runner.ActorRecord(ctx, id)
	if err != nil {
		return ports.Target{Verdict: ports.Refuse, Why: err.Error()}
	}
	wake := templates.DefaultWakeTimeout
	if t, err := s.templates.Get(ctx, a.Template); err == nil {
		if d, err := templates.WakeTimeout(t); err == nil {
			wake = d
		}
	}
	t := ports.Target{WakeTimeout: wake}
	if a.Running != nil {
		t.Verdict = ports.Wait
		return t
	}
	switch api.State(a.State) {
	case api.Running:
		rec, _ := network.ParseRecord(a.Network)
		addr, ok := rec.Attachment.AddrPort(0)
		if !ok {
			return ports.Target{Verdict: ports.Refuse, Why: "the actor has no address on this node"}
		}
		t.Verdict, t.Addr = ports.Ready, addr.Addr()
	case api.Paused, api.Suspended:
		t.Verdict = ports.Wake
	case api.Crashed, api.Exited:
		if a.Snapshot == "" {
			return ports.Target{Verdict: ports.Refuse, Why: "the actor is " + a.State + " with no snapshot to wake it from"}
		}
		t.Verdict = ports.Wake
	case api.Fenced:
		return ports.Target{Verdict: ports.Refuse, Why: "the actor is FENCED: the fleet may run it on another node"}
	default:
		t.Verdict = ports.Wait
	}
	return t
}

// Wake resumes actor id for the connections held on its ports
// (ports.Config.Wake): another operation that took it meanwhile is no
// failure, as where it ends decides.
func (s *Actors) Wake(ctx context.Context, id string) error {
	_, err := s.Resume(ctx, api.OpRequest{ID: id})
	var busy *journal.BusyError
	var state *journal.StateError
	if errors.As(err, &busy) || errors.As(err, &state) {
		return nil
	}
	return err
}
