package gpu

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// UUID is a GPU's 16-byte CUuuid. Its text form is the one nvidia-smi and
// NVML print: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
type UUID [16]byte

// ParseUUID reads a GPU UUID with or without its "GPU-" prefix.
func ParseUUID(s string) (UUID, error) {
	var u UUID
	hexDigits := strings.ReplaceAll(strings.TrimPrefix(s, "GPU-"), "-", "")
	if len(hexDigits) != 32 {
		return u, fmt.Errorf("GPU UUID %q: want 32 hex digits as GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	if _, err := hex.Decode(u[:], []byte(hexDigits)); err != nil {
		return u, fmt.Errorf("GPU UUID %q: %w", s, err)
	}
	return u, nil
}

func (u UUID) String() string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// MarshalText and UnmarshalText make UUIDs read as their text form in JSON.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

func (u *UUID) UnmarshalText(b []byte) error {
	parsed, err := ParseUUID(string(b))
	if err != nil {
		return err
	}
	*u = parsed
	return nil
}

// DevicePair sends the state checkpointed on the GPU Old to the GPU New.
type DevicePair struct {
	Old UUID `json:"old"`
	New UUID `json:"new"`
}

// DeviceMap tells a restore where each checkpointed GPU's state goes. The
// driver needs every GPU the process had checkpointed state on to be named.
type DeviceMap []DevicePair

// ParseDeviceMap reads cuda-checkpoint's --device-map form, OLD=NEW,OLD=NEW.
// An empty string is an empty map.
func ParseDeviceMap(s string) (DeviceMap, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var m DeviceMap
	seenOld := map[UUID]bool{}
	seenNew := map[UUID]bool{}
	for _, entry := range strings.Split(s, ",") {
		oldText, newText, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok {
			return nil, fmt.Errorf("device map entry %q: want OLD_UUID=NEW_UUID", entry)
		}
		oldUUID, err := ParseUUID(oldText)
		if err != nil {
			return nil, fmt.Errorf("device map entry %q: %w", entry, err)
		}
		newUUID, err := ParseUUID(newText)
		if err != nil {
			return nil, fmt.Errorf("device map entry %q: %w", entry, err)
		}
		if seenOld[oldUUID] {
			return nil, fmt.Errorf("device map names GPU %s twice as a source", oldUUID)
		}
		if seenNew[newUUID] {
			return nil, fmt.Errorf("device map sends two GPUs to %s", newUUID)
		}
		seenOld[oldUUID], seenNew[newUUID] = true, true
		m = append(m, DevicePair{Old: oldUUID, New: newUUID})
	}
	return m, nil
}

// String gives the map in the form ParseDeviceMap reads.
func (m DeviceMap) String() string {
	parts := make([]string, len(m))
	for i, p := range m {
		parts[i] = p.Old.String() + "=" + p.New.String()
	}
	return strings.Join(parts, ",")
}
