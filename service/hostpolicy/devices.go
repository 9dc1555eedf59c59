package hostpolicy

import (
	"fmt"
	"regexp"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
)

// vmDrivers are the device drivers a micro-VM template may name: a GPU
// passed through, and the stand-ins the tests detach and attach where a
// GPU would be (without properties neither reaches anything on the host).
// Any other QEMU device could reach the host (a file, a socket, a
// network), so it is refused.
var vmDrivers = map[string]bool{"vfio-pci": true, "virtio-rng-pci": true, "virtio-serial-pci": true}

var pciAddress = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

var deviceID = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// CheckVMDevices refuses devices a template may not give a VM.
func CheckVMDevices(devices []api.Device) error {
	seen := map[string]bool{}
	for _, d := range devices {
		if !deviceID.MatchString(d.ID) || seen[d.ID] {
			return fmt.Errorf("%w: device id %q: want a unique lowercase name of up to 32 letters, digits, '-' or '_'", errdefs.ErrInvalidArgument, d.ID)
		}
		seen[d.ID] = true
		if !vmDrivers[d.Driver] {
			return fmt.Errorf("%w: device %s: driver %q: a micro-VM template may give vfio-pci (a GPU passed through), or virtio-rng-pci or virtio-serial-pci (stand-ins)", ErrForbidden, d.ID, d.Driver)
		}
		for k, v := range d.Props {
			if d.Driver != "vfio-pci" || k != "host" || !pciAddress.MatchString(v) {
				return fmt.Errorf("%w: device %s: property %s=%q: the only property is vfio-pci's host, a PCI address such as 0000:3b:00.0", ErrForbidden, d.ID, k, v)
			}
		}
		if d.Driver == "vfio-pci" && d.Props["host"] == "" {
			return fmt.Errorf("%w: device %s: vfio-pci needs props.host, the GPU's PCI address such as 0000:3b:00.0", errdefs.ErrInvalidArgument, d.ID)
		}
	}
	return nil
}
