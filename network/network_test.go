package network_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/network"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/testkit/testactor"
	"github.com/stasis-run/stasis/testkit/testcni"
)

func newManager(t *testing.T) *network.Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the network tests make network namespaces and run runsc sandboxes, and need root")
	}
	m, err := network.New(network.Config{NetnsDir: t.TempDir(), CNI: network.CNIConfig{
		ConfDir: t.TempDir(), Network: network.DefaultNetwork, BinDirs: network.DefaultBinDirs, CacheDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CNIError(); err != nil {
		t.Fatalf("CNI: %v (scripts/install-cni.sh installs the plugins)", err)
	}
	return m
}

// ask sends a line to the counter at addr and returns its answer.
func ask(t *testing.T, addr netip.AddrPort, line string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr.String(), 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	fmt.Fprintln(conn, line)
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(reply)
}

// TestASandboxKeepsItsAddressAcrossACheckpoint: an actor's namespace on
// the node's CNI network, runsc's netstack in it; reached at its address,
// checkpointed (runsc takes the address off the interface), restored into
// the same namespace after Setup again: the same process answers at the
// same address.
func TestASandboxKeepsItsAddressAcrossACheckpoint(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	a, err := m.Setup(ctx, "net1", network.Want{Mode: network.ModeCNI}, network.Attachment{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Teardown(context.Background(), "net1", a); err != nil {
			t.Error(err)
		}
	})
	addr, ok := a.AddrPort(8000)
	if !ok || a.Netns == "" {
		t.Fatalf("attachment %+v", a)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	testactor.Bundle(t, dir, testactor.Options{Listen: ":8000"})
	spec, err := bundle.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = a.Netns
		}
	}
	if err := bundle.Save(dir, spec); err != nil {
		t.Fatal(err)
	}
	rt, err := gvisor.New(ctx, gvisor.Config{Root: testactor.RunscRoot(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Create(ctx, "net1", dir, runtime.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.Background(), "net1") })
	if err := rt.Start(ctx, "net1"); err != nil {
		t.Fatal(err)
	}
	// The counter listens on TCP before its unix socket appears.
	if _, err := rt.Exec(ctx, "net1", runtime.Process{Args: []string{"/counter", "await", "get"}}); err != nil {
		t.Fatal(err)
	}
	first := ask(t, addr, "incr")
	id, _, _ := strings.Cut(first, " ")
	if !strings.HasSuffix(first, " 1") {
		t.Fatalf("first answer %q", first)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := rt.Checkpoint(ctx, "net1", runtime.CheckpointOptions{ImageDir: image}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Delete(ctx, "net1"); err != nil {
		t.Fatal(err)
	}
	again, err := m.Setup(ctx, "net1", network.Want{}, a)
	if err != nil || again != a {
		t.Fatalf("setup again: %+v, %v; want %+v", again, err, a)
	}
	if err := rt.Restore(ctx, "net1", runtime.RestoreOptions{ImageDir: image, Bundle: dir}); err != nil {
		t.Fatal(err)
	}
	if got := ask(t, addr, "incr"); got != id+" 2" {
		t.Fatalf("after the restore %q, want %q", got, id+" 2")
	}
}

func TestWantsRefused(t *testing.T) {
	m, err := network.New(network.Config{NetnsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if m.Default() != network.ModeNone || m.CNIError() == nil {
		t.Fatalf("without CNI: default %s, CNI error %v", m.Default(), m.CNIError())
	}
	for _, c := range []struct {
		want network.Want
		code error
	}{
		{network.Want{Mode: network.ModeCNI}, errdefs.ErrFailedPrecondition},
		{network.Want{Mode: network.ModeNetns, Netns: "ns1"}, errdefs.ErrInvalidArgument},
		{network.Want{Mode: network.ModeNetns, Netns: "/run/../etc"}, errdefs.ErrInvalidArgument},
		{network.Want{Mode: network.ModeNone, Netns: "/run/netns/x"}, errdefs.ErrInvalidArgument},
		{network.Want{Mode: "bridge"}, errdefs.ErrInvalidArgument},
	} {
		if err := m.Check(c.want); !errors.Is(err, c.code) {
			t.Errorf("%+v: %v, want %v", c.want, err, c.code)
		}
	}
	if err := m.Check(network.Want{Mode: network.ModeNetns, Netns: "/run/netns/x"}); err != nil {
		t.Errorf("a caller's namespace: %v", err)
	}
	if _, err := network.ParseRecord("{"); err == nil {
		t.Error("a damaged record was read")
	}
	if r, err := network.ParseRecord(""); err != nil || r.API() != nil {
		t.Errorf("an empty record: %+v, %v", r, err)
	}
}

func TestAnOperatorsNetworkNeedsItsPlugins(t *testing.T) {
	conf := t.TempDir()
	list := `{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "macvlan", "master": "eth0", "ipam": {"type": "dhcp"}}]}`
	if err := os.WriteFile(filepath.Join(conf, "10-pods.conflist"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := network.New(network.Config{NetnsDir: t.TempDir(), CNI: network.CNIConfig{ConfDir: conf, Network: "pods", BinDirs: []string{t.TempDir()}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CNIError(); err == nil || !strings.Contains(err.Error(), "macvlan") || !strings.Contains(err.Error(), "install-cni.sh") {
		t.Fatalf("a network whose plugin is missing: %v", err)
	}
	m, err = network.New(network.Config{NetnsDir: t.TempDir(), CNI: network.CNIConfig{ConfDir: conf, Network: "elsewhere", BinDirs: network.DefaultBinDirs}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CNIError(); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("a network that is not there: %v", err)
	}
}

// TestANamespaceMadeAgainKeepsItsAddress: a namespace gone as after a
// reboot (unmounted, its interface with it) is made again at the next
// setup, and the plugins hand the actor the address it had.
func TestANamespaceMadeAgainKeepsItsAddress(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	a, err := m.Setup(ctx, "net2", network.Want{Mode: network.ModeCNI}, network.Attachment{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Teardown(context.Background(), "net2", a) })
	if err := unix.Unmount(a.Netns, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.Netns); err != nil {
		t.Fatal(err)
	}
	again, err := m.Setup(ctx, "net2", network.Want{}, a)
	if err != nil || again != a {
		t.Fatalf("made again: %+v, %v; want %+v", again, err, a)
	}
}

func TestRuncsOwnNetworkForEveryActor(t *testing.T) {
	m, err := network.New(network.Config{Runsc: network.ModeHost, NetnsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if m.Default() != network.ModeHost {
		t.Fatalf("default %s", m.Default())
	}
	for _, mode := range []string{network.ModeCNI, network.ModeNone, network.ModeNetns} {
		if err := m.Check(network.Want{Mode: mode, Netns: "/run/netns/x"}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "--network sandbox") {
			t.Errorf("mode %s under runsc's host network: %v", mode, err)
		}
	}
	a, err := m.Setup(context.Background(), "h1", network.Want{}, network.Attachment{})
	if err != nil || a != (network.Attachment{Mode: network.ModeHost}) {
		t.Fatalf("setup: %+v, %v", a, err)
	}
	own, err := network.New(network.Config{NetnsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := own.Check(network.Want{Mode: network.ModeHost}); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "--network host") {
		t.Fatalf("mode host with actors' own networks: %v", err)
	}
}

// TestPluginsThatDoNotAnswerAreStopped: a plugin that waits on what does
// not come (its daemon, a lock another holds) is stopped at the timeout,
// and the setup or teardown fails saying so, where it waited up to the
// actor operation's deadline. A first setup leaves no namespace behind.
func TestPluginsThatDoNotAnswerAreStopped(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the network tests make network namespaces, and need root")
	}
	h := testcni.NewHanging(t)
	if _, err := network.New(network.Config{NetnsDir: t.TempDir(), CNI: network.CNIConfig{ConfDir: h.ConfDir, Network: h.Network, BinDirs: []string{h.BinDir},
		Timeout: -time.Second}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a negative timeout: %v, want invalid_argument", err)
	}
	netnsDir := t.TempDir()
	m, err := network.New(network.Config{NetnsDir: netnsDir, CNI: network.CNIConfig{ConfDir: h.ConfDir, Network: h.Network, BinDirs: []string{h.BinDir},
		CacheDir: t.TempDir(), Timeout: time.Second}})
	if err != nil || m.CNIError() != nil {
		t.Fatalf("network %s: %v, %v", h.Network, err, m.CNIError())
	}
	ctx := context.Background()
	_, err = m.Setup(ctx, "slow1", network.Want{Mode: network.ModeCNI}, network.Attachment{})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "its plugins (hangs) did not attach within 1s") {
		t.Fatalf("setup through a plugin that does not answer ADD: %v", err)
	}
	h.Stopped(t, "ADD")
	if left, _ := os.ReadDir(netnsDir); len(left) != 0 {
		t.Fatalf("the failed setup left %d namespace(s)", len(left))
	}

	h.HangDel(t)
	_, err = m.Setup(ctx, "slow2", network.Want{Mode: network.ModeCNI}, network.Attachment{})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not detach within 1s") {
		t.Fatalf("setup through a plugin that answers nothing: %v", err)
	}
	h.Stopped(t, "DEL")
	err = m.Teardown(ctx, "slow3", network.Attachment{Mode: network.ModeCNI})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "did not detach within 1s") {
		t.Fatalf("teardown through a plugin that does not answer DEL: %v", err)
	}
	h.Stopped(t, "DEL")
}
