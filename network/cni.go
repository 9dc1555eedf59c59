package network

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/stasis-run/stasis/errdefs"
)

// CNIConfig is the node's CNI setup.
type CNIConfig struct {
	// ConfDir holds the operator's network configuration lists
	// (/etc/cni/net.d); Network names the one actors join. Where no list
	// of that name is there and Network is DefaultNetwork, Stasis's own
	// (DefaultConfList) is used.
	ConfDir, Network string
	// BinDirs are where the plugins are looked for.
	BinDirs []string
	// CacheDir is where libcni keeps each attachment's result, for the
	// teardown (DATA/cni).
	CacheDir string
	// Timeout bounds each attach and detach by the plugins;
	// DefaultCNITimeout where zero.
	Timeout time.Duration
}

// DefaultCNITimeout bounds each attach and detach by the plugins: one that
// waits on what does not come (its daemon, an address lock another plugin
// holds) would hold the actor's operation up to its deadline (half an
// hour for a run, ten minutes for a delete). Two minutes is kubelet's
// runtime-request timeout, within which a pod's sandbox and its network
// are made.
const DefaultCNITimeout = 2 * time.Minute

// DefaultNetwork is the name of Stasis's own network.
const DefaultNetwork = "stasis"

// DefaultBinDirs are where the plugins are looked for: where
// scripts/install-cni.sh puts them, then where distributions do.
var DefaultBinDirs = []string{"/usr/local/lib/stasis/cni/bin", "/opt/cni/bin"}

// DefaultConfList is Stasis's own network: a bridge on this node, stasis0,
// the actors' gateway, their addresses from 10.89.0.0/16. The node and the
// actors reach each other; published ports (stasisd's) are how anything
// else reaches an actor. Nothing masquerades the actors' own traffic to
// elsewhere, which would need the nft or iptables command: a network that
// does ("ipMasq": true) is the operator's, in --cni-conf-dir.
const DefaultConfList = `{
  "cniVersion": "1.0.0",
  "name": "stasis",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "stasis0",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "10.89.0.0/16"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}`

// cni is the node's CNI network as loaded, or why it cannot be used.
type cni struct {
	conf    *libcni.CNIConfig
	list    *libcni.NetworkConfigList
	timeout time.Duration
	err     error
}

func loadCNI(cfg CNIConfig) *cni {
	if cfg.Network == "" {
		return &cni{err: errors.New("no CNI network is configured (stasisd --cni-network)")}
	}
	list, err := libcni.LoadNetworkConf(cfg.ConfDir, cfg.Network)
	var notFound libcni.NotFoundError
	var none libcni.NoConfigsFoundError
	if (errors.As(err, &notFound) || errors.As(err, &none) || errors.Is(err, os.ErrNotExist)) && cfg.Network == DefaultNetwork {
		list, err = libcni.NetworkConfFromBytes([]byte(DefaultConfList))
	}
	if err != nil {
		return &cni{err: fmt.Errorf("the CNI network %s in %s: %w", cfg.Network, cfg.ConfDir, err)}
	}
	for _, p := range list.Plugins {
		for _, t := range pluginTypes(p) {
			if !foundIn(cfg.BinDirs, t) {
				return &cni{err: fmt.Errorf("the CNI plugin %s of network %s is in none of %s (install the plugins: scripts/install-cni.sh)", t, cfg.Network, strings.Join(cfg.BinDirs, ", "))}
			}
		}
	}
	return &cni{conf: libcni.NewCNIConfigWithCacheDir(cfg.BinDirs, cfg.CacheDir, nil), list: list, timeout: cmp.Or(cfg.Timeout, DefaultCNITimeout)}
}

// errPluginsTimedOut ends plugins that ran past the timeout.
var errPluginsTimedOut = errors.New("the CNI plugins ran past their timeout")

// plugins runs the network's plugins through call, for the verb what
// (attach, detach), within c.timeout: libcni kills them at its end.
func (c *cni) plugins(ctx context.Context, what string, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeoutCause(ctx, c.timeout, errPluginsTimedOut)
	defer cancel()
	err := call(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errPluginsTimedOut) {
		var names []string
		for _, p := range c.list.Plugins {
			names = append(names, pluginTypes(p)...)
		}
		return errdefs.Mark(fmt.Errorf("its plugins (%s) did not %s within %s and were stopped: one waits on what does not come (its daemon, a lock another holds); the plugins' own logs say which", strings.Join(names, ", "), what, c.timeout), errdefs.ErrDeadlineExceeded)
	}
	return err
}

// pluginTypes are the plugins one entry of a list runs: its own and its
// IPAM's.
func pluginTypes(p *libcni.PluginConfig) []string {
	types := []string{p.Network.Type}
	if p.Network.IPAM.Type != "" {
		types = append(types, p.Network.IPAM.Type)
	}
	return types
}

func foundIn(dirs []string, name string) bool {
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

func (c *cni) name() string {
	if c.list == nil {
		return "(none)"
	}
	return c.list.Name
}

func runtimeConf(id, netns string, ip netip.Addr) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifName}
	if ip.IsValid() {
		// host-local hands this address out again (CNI_ARGS IP).
		rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"IP", ip.String()}}
	}
	return rt
}

// ifName is the actor's interface in its namespace.
const ifName = "eth0"

// add attaches the namespace to the network, or finds it attached, and
// returns its address. An attachment whose interface is there has its
// address and routes put back where runsc took them (a sandbox that ran
// there moved them into its netstack), from the plugins' result that
// libcni keeps. Otherwise (the first time, or the namespace made again
// after a reboot) the plugins attach it, asking for was when it is valid:
// an actor keeps its address on this node.
func (c *cni) add(ctx context.Context, id, netns string, was netip.Addr) (netip.Addr, error) {
	if c.err != nil {
		return netip.Addr{}, c.err
	}
	if cached, err := c.conf.GetNetworkListCachedResult(c.list, runtimeConf(id, netns, netip.Addr{})); err == nil && cached != nil && hasLink(netns, ifName) {
		r, err := current.NewResultFromResult(cached)
		if err != nil {
			return netip.Addr{}, err
		}
		addr, err := ipv4Of(r)
		if err != nil {
			return netip.Addr{}, err
		}
		if have, err := addressIn(netns); err == nil && have == addr {
			return addr, nil
		}
		if err := reapply(netns, r); err != nil {
			return netip.Addr{}, fmt.Errorf("put the address %s back on %s: %w", addr, ifName, err)
		}
		return addr, nil
	}
	// Whatever a half-made attachment left (an address held, a veth) goes
	// first. Plugins that do not answer that will not answer the attach.
	if err := c.del(ctx, id, netns); errors.Is(err, errdefs.ErrDeadlineExceeded) {
		return netip.Addr{}, err
	}
	var res types.Result
	err := c.plugins(ctx, "attach", func(ctx context.Context) (err error) {
		res, err = c.conf.AddNetworkList(ctx, c.list, runtimeConf(id, netns, was))
		return err
	})
	if err != nil {
		return netip.Addr{}, err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return netip.Addr{}, err
	}
	addr, err := ipv4Of(r)
	if err != nil {
		_ = c.del(ctx, id, netns)
		return netip.Addr{}, err
	}
	return addr, nil
}

// ipv4Of is the first IPv4 address of a plugins' result.
func ipv4Of(r *current.Result) (netip.Addr, error) {
	for _, ip := range r.IPs {
		if addr, ok := netip.AddrFromSlice(ip.Address.IP.To4()); ok {
			return addr, nil
		}
	}
	out, _ := json.Marshal(r)
	return netip.Addr{}, fmt.Errorf("the plugins gave no IPv4 address: %s", out)
}

// del detaches the namespace (the plugins forget it; a namespace gone is
// no error to them).
func (c *cni) del(ctx context.Context, id, netns string) error {
	if c.err != nil {
		return c.err
	}
	if _, err := os.Stat(netns); err != nil {
		netns = ""
	}
	return c.plugins(ctx, "detach", func(ctx context.Context) error {
		return c.conf.DelNetworkList(ctx, c.list, runtimeConf(id, netns, netip.Addr{}))
	})
}
