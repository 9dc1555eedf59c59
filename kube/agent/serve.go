package agent

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/stasis-run/stasis/api"
	stasisv1alpha1 "github.com/stasis-run/stasis/kube/api/v1alpha1"
	"github.com/stasis-run/stasis/kube/fleet"
)

// endpoint is where actor name, as stasisd has it here, serves: this
// node's address and its published ports; nil when it publishes none.
func (a *Agent) endpoint(name string, local api.Actor) *stasisv1alpha1.Endpoint {
	n := local.Network
	if n == nil || len(n.Ports) == 0 {
		return nil
	}
	e := &stasisv1alpha1.Endpoint{Service: fleet.ServiceName(name), Address: a.Address}
	for _, p := range n.Ports {
		e.Ports = append(e.Ports, stasisv1alpha1.EndpointPort{Port: int32(p.HostPort), ContainerPort: int32(p.ContainerPort)})
	}
	return e
}

// unbound is the endpoint of an actor that gives its node up: its Service
// alone.
func unbound(e *stasisv1alpha1.Endpoint) *stasisv1alpha1.Endpoint {
	if e == nil {
		return nil
	}
	return &stasisv1alpha1.Endpoint{Service: e.Service}
}

// nodeAddress is the address the Node's kubelet registered: its
// InternalIP, else its ExternalIP.
func nodeAddress(node *corev1.Node) string {
	for _, kind := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, addr := range node.Status.Addresses {
			if addr.Type == kind {
				return addr.Address
			}
		}
	}
	return ""
}
