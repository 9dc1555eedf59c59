package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/runtime/microvm/initramfs"
)

// initramfsMain writes an initramfs with this binary as its /init.
func initramfsMain(args []string) int {
	fs := flag.NewFlagSet("stasis-agent initramfs", flag.ContinueOnError)
	out := fs.String("o", "", "the initramfs to write (required)")
	g := initramfs.Guest{Files: map[string]string{}}
	fs.StringVar(&g.Busybox, "busybox", "", "a static busybox to install as /bin/busybox")
	fs.StringVar(&g.ModulesDir, "modules-dir", "", "the guest kernel's module tree (lib/modules/RELEASE)")
	fs.Func("module", "a module path under --modules-dir to load at boot (repeat, in load order)", func(v string) error {
		g.Modules = append(g.Modules, v)
		return nil
	})
	fs.Func("file", "GUEST_PATH=HOST_PATH: a host file to copy in (repeat)", func(v string) error {
		guest, host, ok := strings.Cut(v, "=")
		if !ok || guest == "" || host == "" {
			return fmt.Errorf("want GUEST_PATH=HOST_PATH, got %q", v)
		}
		g.Files[guest] = host
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: stasis-agent initramfs -o FILE [--busybox FILE] [--modules-dir DIR --module PATH...] [--file GUEST=HOST...]")
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent initramfs:", err)
		return 1
	}
	g.Agent = self
	var buf bytes.Buffer
	if err = initramfs.Write(&buf, g); err == nil {
		err = fsutil.WriteAtomic(*out, &buf, int64(buf.Len()))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "stasis-agent initramfs:", err)
		return 1
	}
	return 0
}
