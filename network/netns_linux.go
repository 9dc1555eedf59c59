package network

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"runtime"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/stasis-run/stasis/errdefs"
)

// nsfsMagic is the file system type of a namespace file (statfs(2)).
const nsfsMagic = 0x6e736673

// isNetnsMount says whether path is a namespace mounted there (and not a
// file a reboot left behind).
func isNetnsMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == nsfsMagic
}

// ensureNetns makes a network namespace and mounts it at path, unless one
// is mounted there already.
func ensureNetns(path string) error {
	if isNetnsMount(path) {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	done := make(chan error, 1)
	go func() {
		// The thread moves into the new namespace and is never unlocked:
		// it ends with the goroutine, and no other goroutine runs there.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "", unix.MS_BIND, ""); err != nil {
			done <- fmt.Errorf("mount the namespace at %s: %w", path, err)
			return
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// removeNetns unmounts and removes the namespace at path; one already
// gone is no error.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount the network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the network namespace %s: %w", path, err)
	}
	return nil
}

// nsGetNSType is NS_GET_NSTYPE (ioctl_ns(2)).
const nsGetNSType = 0xb703

// checkNetns refuses a path that is not a network namespace.
func checkNetns(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return errdefs.Mark(fmt.Errorf("network namespace %s: %w", path, err), errdefs.ErrNotFound)
	}
	defer f.Close()
	t, err := unix.IoctlRetInt(int(f.Fd()), nsGetNSType)
	if err != nil || t != unix.CLONE_NEWNET {
		return fmt.Errorf("%w: %s is not a network namespace", errdefs.ErrInvalidArgument, path)
	}
	return nil
}

// inNetns runs fn with a netlink handle inside the namespace at path.
func inNetns(path string, fn func(*netlink.Handle) error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("open the network namespace %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", path, err)
	}
	defer h.Close()
	return fn(h)
}

// loopbackUp sets the namespace's loopback up: runsc gives the sandbox a
// loopback only where the namespace's is up.
func loopbackUp(path string) error {
	return inNetns(path, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	})
}

// addressIn is the first global IPv4 address of the namespace at path
// outside its loopback; invalid when it has none.
func addressIn(path string) (netip.Addr, error) {
	var found netip.Addr
	err := inNetns(path, func(h *netlink.Handle) error {
		addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP.To4())
			if ok && !ip.IsLoopback() && a.Scope == int(netlink.SCOPE_UNIVERSE) {
				found = ip
				return nil
			}
		}
		return nil
	})
	return found, err
}

// containerID is what the CNI plugins know the namespace at path by: the
// same for the same namespace (its address kept across a restart of
// stasisd), another for every stasisd of the node.
func containerID(path string) string {
	sum := sha256.Sum256([]byte(path))
	return "stasis-" + hex.EncodeToString(sum[:8])
}

// hasLink says whether the namespace at path has an interface of that name.
func hasLink(path, name string) bool {
	err := inNetns(path, func(h *netlink.Handle) error {
		_, err := h.LinkByName(name)
		return err
	})
	return err == nil
}

// reapply puts the addresses and routes of a plugins' result back on the
// interface in the namespace at path, as the plugins had set them.
func reapply(path string, r *current.Result) error {
	return inNetns(path, func(h *netlink.Handle) error {
		link, err := h.LinkByName(ifName)
		if err != nil {
			return err
		}
		if err := h.LinkSetUp(link); err != nil {
			return err
		}
		for _, ip := range r.IPs {
			err := h.AddrAdd(link, &netlink.Addr{IPNet: &ip.Address})
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("address %s: %w", ip.Address.String(), err)
			}
		}
		for _, rt := range r.Routes {
			gw := rt.GW
			if gw == nil {
				for _, ip := range r.IPs {
					if ip.Gateway != nil && (ip.Gateway.To4() == nil) == (rt.Dst.IP.To4() == nil) {
						gw = ip.Gateway
					}
				}
			}
			err := h.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: &rt.Dst, Gw: gw})
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("route to %s: %w", rt.Dst.String(), err)
			}
		}
		return nil
	})
}
