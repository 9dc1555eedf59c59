// Package network gives each actor a network: a network namespace of its
// own that stasisd makes and keeps for as long as the actor lives on this
// node (so that a paused or suspended actor keeps its address), joined to
// the node through CNI (github.com/containernetworking/cni) or left with
// its loopback alone; or a namespace the caller made; or the host's.
// runsc's netstack takes over the namespace's interfaces when the sandbox
// starts or is restored (--network=sandbox), so the sandbox answers at the
// namespace's address.
package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// The modes an actor's network is in.
const (
	// ModeCNI: a namespace of the actor's own, joined to the node's CNI
	// network (a bridge on this node by default): an address the node
	// reaches, ports published.
	ModeCNI = "cni"
	// ModeNetns: a namespace the caller made (a pod's); stasisd neither
	// makes nor removes it.
	ModeNetns = "netns"
	// ModeHost: the host's network, shared with the node.
	ModeHost = "host"
	// ModeNone: a namespace of the actor's own with its loopback alone.
	ModeNone = "none"
)

// Modes lists the modes, for messages.
var Modes = []string{ModeCNI, ModeNetns, ModeHost, ModeNone}

// Want is the network an actor asks for: a mode ("" for the node's
// default), and for ModeNetns the namespace's path.
type Want struct {
	Mode  string
	Netns string
}

// Attachment is an actor's network as set up, recorded with the actor: the
// namespace its sandbox joins ("" for the host's) and its address.
type Attachment struct {
	Mode string `json:"mode"`
	// Netns is the namespace's path; made by stasisd for ModeCNI and
	// ModeNone.
	Netns string `json:"netns,omitempty"`
	// Address is the actor's IPv4 address on the node's network (ModeCNI,
	// and ModeNetns where the namespace has one).
	Address string `json:"address,omitempty"`
	// ContainerID is the id the CNI plugins know the attachment by.
	ContainerID string `json:"containerID,omitempty"`
}

// Config is where the networks live.
type Config struct {
	// Runsc is runsc's own network for every sandbox (stasisd's
	// --network): "" or "sandbox" gives each actor the namespace of its
	// mode; "host" or "none" gives every actor that, and no other mode
	// can be had.
	Runsc string
	// NetnsDir holds the namespaces stasisd makes, one file each (a bind
	// mount of the namespace): DATA/netns.
	NetnsDir string
	// CNI is the node's CNI setup; zero when CNI is not installed.
	CNI CNIConfig
}

// Manager sets actors' networks up and tears them down. Safe for
// concurrent use: each call concerns one actor, which the caller's
// operation holds.
type Manager struct {
	cfg Config
	cni *cni
}

// New is a manager for cfg, with the CNI network loaded when cfg.CNI
// names one that is installed; CNIError says why not.
func New(cfg Config) (*Manager, error) {
	if cfg.CNI.Timeout < 0 {
		return nil, fmt.Errorf("%w: CNI timeout %s: want a positive duration (or none, for %s)", errdefs.ErrInvalidArgument, cfg.CNI.Timeout, DefaultCNITimeout)
	}
	if err := os.MkdirAll(cfg.NetnsDir, 0o700); err != nil {
		return nil, fmt.Errorf("network namespaces: %w", err)
	}
	m := &Manager{cfg: cfg}
	if m.fixed() != "" {
		m.cni = &cni{err: fmt.Errorf("stasisd runs runsc with --network %s", cfg.Runsc)}
		return m, nil
	}
	m.cni = loadCNI(cfg.CNI)
	return m, nil
}

// Fixed is the one mode every actor has when runsc gives every sandbox its
// network (stasisd's --network host or none): Setup then makes nothing and
// always answers an attachment of that mode.
func (m *Manager) Fixed() (mode string, ok bool) {
	f := m.fixed()
	return f, f != ""
}

// fixed is the one mode every actor has when runsc gives every sandbox its
// network, "" when each actor has its own.
func (m *Manager) fixed() string {
	if m.cfg.Runsc == ModeHost || m.cfg.Runsc == ModeNone {
		return m.cfg.Runsc
	}
	return ""
}

// Default is the mode an actor gets when it asks for none: cni where CNI
// is installed, none otherwise.
func (m *Manager) Default() string {
	if f := m.fixed(); f != "" {
		return f
	}
	if m.cni.err == nil {
		return ModeCNI
	}
	return ModeNone
}

// CNIError says why CNI cannot be used on this node (nil when it can).
func (m *Manager) CNIError() error { return m.cni.err }

// Check refuses a network an actor may not have here, with the fix.
func (m *Manager) Check(w Want) error {
	if f := m.fixed(); f != "" && w.Mode != "" && w.Mode != f {
		return fmt.Errorf("%w: network mode %s: this stasisd runs runsc with --network %s, which gives every actor that network (start it with --network sandbox for a network of the actor's own)", errdefs.ErrFailedPrecondition, w.Mode, f)
	}
	if w.Mode == ModeHost && m.fixed() != ModeHost {
		return fmt.Errorf("%w: network mode host: start stasisd with --network host (runsc's), which gives every sandbox the node's network", errdefs.ErrFailedPrecondition)
	}
	if w.Netns != "" && w.Mode != ModeNetns {
		return fmt.Errorf("%w: a network namespace path is for network mode %s", errdefs.ErrInvalidArgument, ModeNetns)
	}
	switch w.Mode {
	case "", ModeNone, ModeHost:
	case ModeCNI:
		if m.cni.err != nil {
			return errdefs.Mark(fmt.Errorf("network mode cni: %w", m.cni.err), errdefs.ErrFailedPrecondition)
		}
	case ModeNetns:
		if !filepath.IsAbs(w.Netns) || filepath.Clean(w.Netns) != w.Netns {
			return fmt.Errorf("%w: network namespace %q: give the clean absolute path of a namespace (such as /var/run/netns/NAME)", errdefs.ErrInvalidArgument, w.Netns)
		}
	default:
		return fmt.Errorf("%w: network mode %q: want one of %s", errdefs.ErrInvalidArgument, w.Mode, strings.Join(Modes, ", "))
	}
	return nil
}

// Setup gives actor id the network it wants, or finds the one it has (a
// paused or suspended actor's, or one a crash left half made): have is
// what its record holds, zero at its first setup. It is safe to call
// again with what it returned.
func (m *Manager) Setup(ctx context.Context, id string, w Want, have Attachment) (Attachment, error) {
	if err := m.Check(w); err != nil {
		return Attachment{}, err
	}
	if f := m.fixed(); f != "" {
		return Attachment{Mode: f}, nil
	}
	mode := w.Mode
	if mode == "" {
		mode = have.Mode
	}
	if mode == "" {
		mode = m.Default()
	}
	switch mode {
	case ModeHost:
		return Attachment{Mode: ModeHost}, nil
	case ModeNetns:
		if err := checkNetns(w.Netns); err != nil {
			return Attachment{}, err
		}
		a := Attachment{Mode: ModeNetns, Netns: w.Netns}
		addr, err := addressIn(w.Netns)
		if err != nil {
			return Attachment{}, err
		}
		if addr.IsValid() {
			a.Address = addr.String()
		}
		return a, nil
	}
	a := Attachment{Mode: mode, Netns: m.netnsPath(id)}
	if err := ensureNetns(a.Netns); err != nil {
		return Attachment{}, fmt.Errorf("the network namespace of actor %s: %w", id, err)
	}
	if err := loopbackUp(a.Netns); err != nil {
		return Attachment{}, fmt.Errorf("the loopback of actor %s: %w", id, err)
	}
	if mode == ModeNone {
		return a, nil
	}
	a.ContainerID = containerID(a.Netns)
	was, _ := netip.ParseAddr(have.Address)
	addr, err := m.cni.add(ctx, a.ContainerID, a.Netns, was)
	if err != nil {
		if have.Mode == "" {
			// A first setup leaves nothing behind.
			_ = removeNetns(a.Netns)
		}
		return Attachment{}, fmt.Errorf("the CNI network %s for actor %s: %w", m.cni.name(), id, err)
	}
	a.Address = addr.String()
	return a, nil
}

// Teardown removes what Setup made for actor id, whose attachment is a
// (what a setup cut short made is found by the actor's id): its CNI
// attachment (its address handed back) and its namespace. A namespace the
// caller made is left. It is safe to call again.
func (m *Manager) Teardown(ctx context.Context, id string, a Attachment) error {
	if a.Mode == ModeHost || a.Mode == ModeNetns || m.fixed() != "" {
		return nil
	}
	path := m.netnsPath(id)
	var errs []error
	if m.cni.err == nil {
		if err := m.cni.del(ctx, containerID(path), path); err != nil {
			errs = append(errs, fmt.Errorf("the CNI network %s: %w", m.cni.name(), err))
		}
	}
	if err := removeNetns(path); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// netnsPath is where actor id's namespace is mounted.
func (m *Manager) netnsPath(id string) string { return filepath.Join(m.cfg.NetnsDir, id) }

// AddrPort is port at a's address, when it has one.
func (a Attachment) AddrPort(port uint16) (netip.AddrPort, bool) {
	addr, err := netip.ParseAddr(a.Address)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, port), true
}

// Record is what stasisd keeps of an actor's network in its journal: what
// it asked for, the ports published for it, and the attachment as set up
// (zero until it is).
type Record struct {
	Want       Want       `json:"want"`
	Ports      []api.Port `json:"ports,omitempty"`
	Attachment Attachment `json:"attachment"`
}

// ParseRecord reads a record as Encode wrote it; "" is the zero record (an
// actor made before networks were recorded).
func ParseRecord(s string) (Record, error) {
	var r Record
	if s == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("the actor's network record: %w", err)
	}
	return r, nil
}

// Encode is the record as the journal keeps it.
func (r Record) Encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// API is the record as the API shows it; nil when nothing was set up or
// published.
func (r Record) API() *api.ActorNetwork {
	if r.Attachment.Mode == "" && len(r.Ports) == 0 {
		return nil
	}
	return &api.ActorNetwork{Mode: r.Attachment.Mode, Address: r.Attachment.Address, Ports: r.Ports}
}
