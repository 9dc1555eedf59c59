package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Port is the guest's end of the agent's virtio-serial port.
type Port struct{ f *os.File }

// hostPoll is how often a port without a host is read again. While no host
// program is connected the port reads as end of file, and poll(2) reports
// it readable all the same, so a reconnect can only be noticed by reading
// again.
const hostPoll = 20 * time.Millisecond

// OpenPort opens the virtio-serial port called name. Without udev there are
// no /dev/virtio-ports links, so the port is found by its name in sysfs.
func OpenPort(sysRoot, devRoot, name string) (*Port, error) {
	dir := filepath.Join(sysRoot, "class/virtio-ports")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("virtio-serial ports: %w (is the virtio_console module loaded?)", err)
	}
	for _, e := range entries {
		got, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
		if err != nil || strings.TrimSpace(string(got)) != name {
			continue
		}
		f, err := os.OpenFile(filepath.Join(devRoot, e.Name()), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open port %s: %w", name, err)
		}
		return &Port{f: f}, nil
	}
	return nil, fmt.Errorf("no virtio-serial port named %s in %s (the host adds it as a virtserialport with name=%s)", name, dir, name)
}

// Read waits for the host's next bytes, across host programs coming and
// going.
func (p *Port) Read(b []byte) (int, error) {
	for {
		n, err := p.f.Read(b)
		if n > 0 || (err != nil && !errors.Is(err, io.EOF)) {
			return n, err
		}
		time.Sleep(hostPoll)
	}
}

func (p *Port) Write(b []byte) (int, error) { return p.f.Write(b) }

func (p *Port) Close() error { return p.f.Close() }
