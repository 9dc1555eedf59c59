package gpu

import "testing"

func TestParseDeviceMap(t *testing.T) {
	const a = "GPU-00112233-4455-6677-8899-aabbccddeeff"
	const b = "GPU-ffeeddcc-bbaa-9988-7766-554433221100"
	m, err := ParseDeviceMap(a + "=" + b)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String(); got != a+"="+b {
		t.Errorf("round trip: %q", got)
	}
	if m[0].Old[0] != 0x00 || m[0].Old[15] != 0xff || m[0].New[0] != 0xff {
		t.Errorf("bytes: %x", m[0])
	}
	for _, bad := range []string{
		"nonsense",
		a,
		a + "=" + "GPU-1234",
		a + "=" + b + "," + a + "=" + b,
		a + "=zz112233-4455-6677-8899-aabbccddeeff",
	} {
		if _, err := ParseDeviceMap(bad); err == nil {
			t.Errorf("ParseDeviceMap(%q) accepted", bad)
		}
	}
	if m, err := ParseDeviceMap(""); err != nil || len(m) != 0 {
		t.Errorf("empty map: %v %v", m, err)
	}
}
