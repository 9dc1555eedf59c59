package templates

import (
	"fmt"
	"time"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// DefaultWakeTimeout is how long a connection for a paused or suspended
// actor is held while it wakes, when its template does not say.
const DefaultWakeTimeout = 2 * time.Minute

// CheckPorts refuses ports out of range, and a host address given twice
// (among ports and more).
func CheckPorts(ports ...[]api.Port) error {
	seen := map[api.Port]bool{}
	for _, list := range ports {
		for _, p := range list {
			if err := p.Check(); err != nil {
				return err
			}
			key := api.Port{HostIP: p.HostIP, HostPort: p.HostPort}
			if p.HostPort != 0 && seen[key] {
				return fmt.Errorf("%w: host port %s is published twice", errdefs.ErrInvalidArgument, p)
			}
			seen[key] = true
		}
	}
	return nil
}

// checkServe checks what a template says of its network, ports and idle
// actors.
func checkServe(t *api.Template) error {
	if err := CheckPorts(t.Ports); err != nil {
		return fmt.Errorf("template %s: %w", t.Name, err)
	}
	if t.Runtime == api.RuntimeMicroVM && (len(t.Ports) > 0 || t.Network != (api.Network{}) || t.Idle != nil) {
		return fmt.Errorf("%w: template %s: network, ports and idle are for gVisor actors; a micro-VM has none of them yet", errdefs.ErrInvalidArgument, t.Name)
	}
	if i := t.Idle; i != nil {
		if d, err := time.ParseDuration(i.After); err != nil || d <= 0 {
			return fmt.Errorf("%w: template %s: idle.after %q: want a positive duration such as 10m", errdefs.ErrInvalidArgument, t.Name, i.After)
		}
		if i.Then != api.IdlePause && i.Then != api.IdleSuspend {
			return fmt.Errorf("%w: template %s: idle.then %q: want %s or %s", errdefs.ErrInvalidArgument, t.Name, i.Then, api.IdlePause, api.IdleSuspend)
		}
	}
	if _, err := WakeTimeout(*t); err != nil {
		return err
	}
	return nil
}

// WakeTimeout is how long a connection for a paused or suspended actor of
// t is held while it wakes.
func WakeTimeout(t api.Template) (time.Duration, error) {
	if t.WakeTimeout == "" {
		return DefaultWakeTimeout, nil
	}
	d, err := time.ParseDuration(t.WakeTimeout)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: template %s: wakeTimeout %q: want a positive duration such as 2m", errdefs.ErrInvalidArgument, t.Name, t.WakeTimeout)
	}
	return d, nil
}

// IdleAfter is how long an actor of t may stay idle, and what it then
// becomes; zero when t says nothing.
func IdleAfter(t api.Template) (time.Duration, string) {
	if t.Idle == nil {
		return 0, ""
	}
	d, _ := time.ParseDuration(t.Idle.After)
	return d, t.Idle.Then
}
