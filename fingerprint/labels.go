package fingerprint

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// LabelPrefix is the namespace of the labels Stasis publishes. NFD passes
// labels of a vendor namespace through to the node as they are.
const LabelPrefix = "stasis.dev/"

// Label is one Kubernetes node label.
type Label struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Labels are the node labels a scheduler places restores with: the
// compatibility class (one label, so that plain node affinity on it finds
// every node that can restore a snapshot taken on a node of that class),
// then the facts behind it and the GPU count, for people and for rules
// that need numbers.
func (f Fingerprint) Labels() []Label {
	labels := []Label{
		{LabelPrefix + "class", f.Class()},
		{LabelPrefix + "arch", f.Arch},
		{LabelPrefix + "runtime", f.Runtime.Name},
		{LabelPrefix + "runtime.version", f.Runtime.Version},
		{LabelPrefix + "gpu.count", strconv.Itoa(len(f.GPU.Devices))},
	}
	if f.GPU.Available {
		models := f.GPUModels()
		labels = append(labels,
			Label{LabelPrefix + "gpu.driver", f.GPU.DriverVersion},
			Label{LabelPrefix + "gpu.model", f.GPU.Devices[0].Name},
			Label{LabelPrefix + "gpu.pci-id", strings.Join(models, "_")},
			Label{LabelPrefix + "gpu.checkpoint", strconv.FormatBool(f.CheckpointAPI.Available)},
		)
	}
	for i := range labels {
		labels[i].Value = labelValue(labels[i].Value)
	}
	return labels
}

// labelValue makes s a valid label value: at most 63 characters of
// [A-Za-z0-9._-], starting and ending with a letter or digit.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	return strings.Trim(string(b), "._-")
}

// WriteFeatureFile writes labels in the format of NFD's local feature
// source (a file in /etc/kubernetes/node-feature-discovery/features.d/):
// one key=value per line. With a non-zero expiry NFD drops the labels after
// that time, so a node whose stasisd stopped refreshing them loses them.
func WriteFeatureFile(w io.Writer, labels []Label, expiry time.Time) error {
	var b strings.Builder
	b.WriteString("# Written by stasis node labels; the node's Stasis compatibility facts.\n")
	if !expiry.IsZero() {
		fmt.Fprintf(&b, "# +expiry-time=%s\n", expiry.UTC().Format(time.RFC3339))
	}
	for _, l := range labels {
		fmt.Fprintf(&b, "%s=%s\n", l.Key, l.Value)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// GFDLabels are the labels NVIDIA's GPU Feature Discovery publishes, with
// its names and value forms, for a node with GPUs (none without): a
// cluster that runs GFD already has them, one that does not gets the same
// scheduling facts from Stasis.
func (f Fingerprint) GFDLabels() []Label {
	if !f.GPU.Available || len(f.GPU.Devices) == 0 {
		return nil
	}
	d := f.GPU.Devices[0]
	labels := []Label{
		{"nvidia.com/gpu.product", strings.ReplaceAll(d.Name, " ", "-")},
		{"nvidia.com/gpu.count", strconv.Itoa(len(f.GPU.Devices))},
		{"nvidia.com/gpu.memory", strconv.FormatUint(d.MemoryTotal>>20, 10)},
	}
	if parts := strings.Split(f.GPU.DriverVersion, "."); len(parts) == 3 {
		labels = append(labels, Label{"nvidia.com/cuda.driver.major", parts[0]}, Label{"nvidia.com/cuda.driver.minor", parts[1]}, Label{"nvidia.com/cuda.driver.rev", parts[2]})
	}
	for i := range labels {
		labels[i].Value = labelValue(labels[i].Value)
	}
	return labels
}
