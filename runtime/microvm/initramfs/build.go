package initramfs

import (
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// ModulesList is where /init finds the kernel modules to load at boot, one
// guest path per line, in load order.
const ModulesList = "etc/stasis/modules"

// DefaultApplets are the busybox commands a guest gets when Guest.Applets
// is empty: enough for a shell workload and for a person debugging one.
var DefaultApplets = []string{"sh", "cat", "echo", "ls", "mkdir", "rm", "touch", "sleep", "ps", "mount", "dmesg", "lspci"}

// Guest is what goes into a guest's initramfs.
type Guest struct {
	// Agent is the stasis-agent binary, a static executable, installed as
	// /init and /bin/stasis-agent.
	Agent string
	// Busybox, when set, is a static busybox installed as /bin/busybox,
	// with a link in /bin for each of Applets (DefaultApplets when empty).
	Busybox string
	Applets []string
	// ModulesDir is a kernel's module tree (lib/modules/RELEASE); Modules
	// are paths under it, in the order /init loads them.
	ModulesDir string
	Modules    []string
	// Files are host files to copy in, by guest path; each keeps its mode.
	Files map[string]string
}

// Write writes g's initramfs, gzip-compressed, to w.
func Write(w io.Writer, g Guest) error {
	if g.Agent == "" {
		return fmt.Errorf("initramfs: no agent binary given")
	}
	// The guest has no dynamic loader: a /init that asks for one fails
	// only at boot, minutes later, with "Failed to execute /init".
	for what, bin := range map[string]string{"the agent": g.Agent, "busybox": g.Busybox} {
		if bin == "" {
			continue
		}
		if interp, err := dynamicLoader(bin); err != nil {
			return fmt.Errorf("initramfs: %s %s: %w", what, bin, err)
		} else if interp != "" {
			return fmt.Errorf("initramfs: %s %s is linked dynamically (it asks for %s), and the guest has no dynamic loader: build it static (stasis-agent: CGO_ENABLED=0 go build ./cmd/stasis-agent)", what, bin, interp)
		}
	}
	zw := gzip.NewWriter(w)
	b := builder{a: newArchive(zw)}
	// The kernel opens /dev/console for /init's standard streams before
	// devtmpfs is mounted, so the node must be in the archive.
	b.dir("dev")
	b.a.entry("dev/console", sIFCHR|0o600, 5, 1, nil)
	for _, d := range []string{"proc", "sys", "run", "tmp", "etc/stasis"} {
		b.dir(d)
	}
	b.copy("init", g.Agent)
	b.symlink("bin/stasis-agent", "/init")
	if g.Busybox != "" {
		b.copy("bin/busybox", g.Busybox)
		applets := g.Applets
		if len(applets) == 0 {
			applets = DefaultApplets
		}
		for _, name := range applets {
			b.symlink("bin/"+name, "busybox")
		}
	}
	var list strings.Builder
	for _, m := range g.Modules {
		guestPath := path.Join("lib/modules", path.Base(m))
		b.copy(guestPath, filepath.Join(g.ModulesDir, m))
		fmt.Fprintln(&list, "/"+guestPath)
	}
	b.file(ModulesList, 0o644, []byte(list.String()))
	guestPaths := make([]string, 0, len(g.Files))
	for p := range g.Files {
		guestPaths = append(guestPaths, p)
	}
	sort.Strings(guestPaths)
	for _, p := range guestPaths {
		b.copy(p, g.Files[p])
	}
	if err := b.a.close(); err != nil {
		return err
	}
	return zw.Close()
}

// dynamicLoader is the program interpreter an ELF executable asks for ("":
// none, a static one, or not ELF).
func dynamicLoader(path string) (string, error) {
	raw, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(raw, magic); err != nil || string(magic) != elf.ELFMAG {
		return "", nil
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return "", err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", err
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", nil
}

// builder adds entries and the folders above them.
type builder struct{ a *archive }

func (b *builder) dir(p string) {
	if parent := path.Dir(p); parent != "." && parent != "/" {
		b.dir(parent)
	}
	if clean, err := cleanPath(p); err == nil && b.a.seen[clean] {
		return
	}
	b.a.entry(p, sIFDIR|0o755, 0, 0, nil)
}

func (b *builder) parents(p string) {
	if clean, err := cleanPath(p); err == nil {
		if parent := path.Dir(clean); parent != "." {
			b.dir(parent)
		}
	}
}

func (b *builder) file(p string, mode uint32, data []byte) {
	b.parents(p)
	b.a.entry(p, sIFREG|mode, 0, 0, data)
}

func (b *builder) symlink(p, target string) {
	b.parents(p)
	b.a.entry(p, sIFLNK|0o777, 0, 0, []byte(target))
}

// copy adds a host file, keeping its permission bits.
func (b *builder) copy(p, host string) {
	if b.a.err != nil {
		return
	}
	fi, err := os.Stat(host)
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file")
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(host)
	}
	if err != nil {
		b.a.err = fmt.Errorf("initramfs: %s (for %s): %w", host, p, err)
		return
	}
	b.file(p, perm(fi.Mode()), data)
}
