package bundle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

// CDIKind is the CDI device kind under which Stasis publishes its helper.
// A container that asks for CDIDevice gets the helper at HelperPath.
const (
	CDIKind   = "stasis.dev/cuda"
	CDIDevice = CDIKind + "=helper"
)

// HelperCDISpec is a CDI spec that injects the host's stasis-cuda binary at
// HelperPath, for platforms that add devices through CDI instead of editing
// the OCI spec.
func HelperCDISpec(hostPath string) (*cdi.Spec, error) {
	abs, err := filepath.Abs(hostPath)
	if err != nil {
		return nil, err
	}
	return &cdi.Spec{
		Version: "0.6.0",
		Kind:    CDIKind,
		Devices: []cdi.Device{{
			Name: "helper",
			ContainerEdits: cdi.ContainerEdits{
				Mounts: []*cdi.Mount{{HostPath: abs, ContainerPath: HelperPath, Type: "bind", Options: []string{"bind", "ro"}}},
			},
		}},
	}, nil
}

// WriteHelperCDISpec writes the helper's CDI spec into a CDI spec folder
// (usually /etc/cdi or /var/run/cdi) and returns the file written.
func WriteHelperCDISpec(cdiDir, hostPath string) (string, error) {
	spec, err := HelperCDISpec(hostPath)
	if err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		return "", fmt.Errorf("CDI spec folder: %w", err)
	}
	path := filepath.Join(cdiDir, "stasis-cuda.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("CDI spec: %w", err)
	}
	return path, nil
}
