package agent

import (
	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
)

// stasisdTemplate is the template stasisd on this node is given for the
// ActorTemplate name: the one conversion of the CRD's spec into the API's
// (TestEveryTemplateFieldReachesStasisd holds it whole). Two fields stay
// with the fleet: Golden (the agent stages the snapshot and starts actors
// from it) and a port's Name (it names the port in the actor's Service).
// Ports are published on every address of the node: the endpoint names
// the node's.
func stasisdTemplate(name string, spec stasisv1alpha1.ActorTemplateSpec) api.Template {
	at := api.Template{Name: name, Runtime: spec.Runtime, Rootfs: spec.Rootfs, Bundle: spec.Bundle, Args: spec.Args, Env: spec.Env,
		GPUs: int(spec.GPUs), MemoryBytes: spec.MemoryBytes, Durable: spec.Durable,
		Network: api.Network{Mode: spec.Network}, WakeTimeout: spec.WakeTimeout, Restart: spec.Restart}
	if vm := spec.VM; vm != nil {
		at.VM = &api.VM{Kernel: vm.Kernel, Initramfs: vm.Initramfs, Cmdline: vm.Cmdline, CPUs: int(vm.CPUs)}
		for _, d := range vm.Devices {
			at.VM.Devices = append(at.VM.Devices, api.Device{ID: d.ID, Driver: d.Driver, Props: d.Props})
		}
	}
	if p := spec.Probe; p != nil {
		at.Probe = api.Probe{Command: p.Command, URL: p.URL, TimeoutSeconds: float64(p.TimeoutSeconds)}
	}
	for _, p := range spec.Ports {
		at.Ports = append(at.Ports, api.Port{HostPort: int(p.HostPort), ContainerPort: int(p.ContainerPort)})
	}
	if i := spec.Idle; i != nil {
		at.Idle = &api.Idle{After: i.After, Then: i.Then}
	}
	return at
}
