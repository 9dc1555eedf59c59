package microvm

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stasis-run/stasis/runtime/microvm/agent"
)

// DetachDevices unplugs every device of the VM's bundle, one by one, each
// only once the guest has released it (QEMU's DEVICE_DELETED event).
func (r *Runtime) DetachDevices(ctx context.Context, id string) error {
	return r.changeDevices(ctx, id, func(ctx context.Context, q *qmp, st *vmState, present *[]string) error {
		for _, d := range st.Spec.Devices {
			if !slices.Contains(*present, d.ID) {
				continue
			}
			if err := q.execute(ctx, "device_del", map[string]any{"id": d.ID}, nil); err != nil {
				return fmt.Errorf("VM %s: detach %s (%s): %w", id, d.ID, d.Driver, err)
			}
			dctx, cancel := context.WithTimeout(ctx, r.cfg.DeviceTimeout)
			_, err := q.waitEvent(dctx, func(ev qmpEvent) bool {
				var data struct {
					Device string `json:"device"`
				}
				_ = json.Unmarshal(ev.Data, &data)
				return ev.Event == "DEVICE_DELETED" && data.Device == d.ID
			})
			cancel()
			if err != nil {
				return fmt.Errorf("VM %s: detach %s (%s): the guest did not release it within %s: %w", id, d.ID, d.Driver, r.cfg.DeviceTimeout, err)
			}
			*present = slices.DeleteFunc(*present, func(p string) bool { return p == d.ID })
		}
		return nil
	})
}

// AttachDevices plugs in every device of the VM's bundle that the VM does
// not hold, and waits until the guest lists each on its PCI bus.
func (r *Runtime) AttachDevices(ctx context.Context, id string) error {
	return r.changeDevices(ctx, id, func(ctx context.Context, q *qmp, st *vmState, present *[]string) error {
		for _, d := range st.Spec.Devices {
			if slices.Contains(*present, d.ID) {
				continue
			}
			if err := q.execute(ctx, "device_add", d.qmpArgs(), nil); err != nil {
				return fmt.Errorf("VM %s: attach %s (%s): %w", id, d.ID, d.Driver, err)
			}
			*present = append(*present, d.ID)
			slot, err := pciSlot(ctx, q, d.ID)
			if err != nil {
				return fmt.Errorf("VM %s: attach %s: %w", id, d.ID, err)
			}
			if err := r.waitGuestSees(ctx, id, slot); err != nil {
				return fmt.Errorf("VM %s: attach %s (%s): %w", id, d.ID, d.Driver, err)
			}
		}
		return nil
	})
}

// changeDevices runs change on the VM's monitor with the ids of the devices
// the VM holds, which QEMU's device tree tells (nothing else keeps them).
func (r *Runtime) changeDevices(ctx context.Context, id string, change func(ctx context.Context, q *qmp, st *vmState, present *[]string) error) error {
	return r.talk(ctx, id, true, func(ctx context.Context) error {
		st, q, err := r.session(ctx, id)
		if err != nil {
			return err
		}
		defer q.close()
		present, err := peripherals(ctx, q)
		if err != nil {
			return fmt.Errorf("VM %s: %w", id, err)
		}
		return change(ctx, q, st, &present)
	})
}

// peripherals lists the ids of the VM's user-created devices.
func peripherals(ctx context.Context, q *qmp) ([]string, error) {
	var props []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	if err := q.execute(ctx, "qom-list", map[string]any{"path": "/machine/peripheral"}, &props); err != nil {
		return nil, err
	}
	var ids []string
	for _, p := range props {
		if strings.HasPrefix(p.Type, "child<") && !reservedIDs[p.Name] {
			ids = append(ids, p.Name)
		}
	}
	return ids, nil
}

// pciSlot is where the guest finds the device: its address on the root
// bus, as Linux names it.
func pciSlot(ctx context.Context, q *qmp, id string) (string, error) {
	var buses []struct {
		Bus     int `json:"bus"`
		Devices []struct {
			Slot     int    `json:"slot"`
			Function int    `json:"function"`
			QdevID   string `json:"qdev_id"`
		} `json:"devices"`
	}
	if err := q.execute(ctx, "query-pci", nil, &buses); err != nil {
		return "", err
	}
	for _, b := range buses {
		for _, d := range b.Devices {
			if d.QdevID == id {
				return fmt.Sprintf("0000:%02x:%02x.%x", b.Bus, d.Slot, d.Function), nil
			}
		}
	}
	return "", fmt.Errorf("QEMU lists no PCI device %s on its root bus", id)
}

// guestPollInterval is how often the guest is asked whether a hot-plugged
// device has appeared; the guest sends no notice of it.
const guestPollInterval = 100 * time.Millisecond

func (r *Runtime) waitGuestSees(ctx context.Context, id, slot string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.DeviceTimeout)
	defer cancel()
	tick := time.NewTicker(guestPollInterval)
	defer tick.Stop()
	for {
		rep, err := r.call(ctx, id, agent.Request{Op: agent.OpFacts})
		if err == nil && slices.ContainsFunc(rep.Facts.PCIDevices, func(d string) bool { return strings.HasSuffix(d, "@"+slot) }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the guest does not list %s on its PCI bus after %s (last answer: %v)", slot, r.cfg.DeviceTimeout, err)
		case <-tick.C:
		}
	}
}
