package main

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/units"
)

func newTemplate(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Create, warm, list and remove actor templates (through stasisd)"}
	var t api.Template
	var memory, onPause, onCommit string
	var probeTimeout float64
	var vm api.VM
	var devices, publish, mounts []string
	var idleAfter, idleThen string
	create := &cobra.Command{
		Use:   "create NAME (--image PATH [-- ARGS...] | --bundle DIR | --rootfs DIR -- ARGS... | --runtime microvm --kernel FILE --initramfs FILE -- ARGS...)",
		Short: "Record a template: runtime, bundle, rootfs or guest, GPUs, memory, durable folders, readiness probe, snapshot scopes",
		Long: `Create records a template. A gVisor template (the default runtime) runs a container
image (--image: an OCI image layout folder, or a docker save / podman save tarball,
which stasisd unpacks into a bundle of its own; its entrypoint, cmd, env, working
folder and user are the process's, and args after -- replace its cmd), an OCI bundle,
or a root filesystem folder and the args after --. A micro-VM template (--runtime
microvm) runs a bundle whose spec has a vm section, or boots --kernel and --initramfs
(whose /init is stasis-agent: docs/microvm.md) and has the guest agent start the args
after --; --memory is then the guest's memory, and --vm-device gives it PCI devices
(a GPU: --vm-device gpu0=vfio-pci,host=0000:3b:00.0).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t.Name, t.Args = args[0], args[1:]
			if vm.Kernel != "" || vm.Initramfs != "" || len(vm.Cmdline) > 0 || vm.CPUs != 0 || len(devices) > 0 {
				for _, d := range devices {
					dev, err := parseVMDevice(d)
					if err != nil {
						return err
					}
					vm.Devices = append(vm.Devices, dev)
				}
				for _, p := range []*string{&vm.Kernel, &vm.Initramfs} {
					if err := absolute(p); err != nil {
						return err
					}
				}
				t.VM = &vm
			}
			if memory != "" {
				n, err := units.ParseBytes(memory)
				if err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
				t.MemoryBytes = int64(n)
			}
			for _, m := range mounts {
				mount, err := api.ParseMount(m)
				if err != nil {
					return err
				}
				if err := absolute(&mount.Source); err != nil {
					return err
				}
				t.Mounts = append(t.Mounts, mount)
			}
			for _, p := range publish {
				port, err := api.ParsePort(p)
				if err != nil {
					return err
				}
				t.Ports = append(t.Ports, port)
			}
			if idleAfter != "" {
				t.Idle = &api.Idle{After: idleAfter, Then: idleThen}
			}
			if err := checkProbeCommand(t.Probe.Command); err != nil {
				return err
			}
			t.Probe.TimeoutSeconds = probeTimeout
			t.Snapshots = api.SnapshotConfig{OnPause: api.Scope(onPause), OnCommit: api.Scope(onCommit)}
			for _, p := range []*string{&t.Bundle, &t.Rootfs, &t.Image} {
				if err := absolute(p); err != nil {
					return err
				}
			}
			got, err := g.client().CreateTemplate(cmd.Context(), t)
			if err != nil {
				return err
			}
			return g.print(got, describeTemplate(got))
		},
	}
	f := create.Flags()
	f.StringVar(&t.Runtime, "runtime", api.RuntimeGVisor, "what runs the actors: gvisor or microvm (QEMU; stasis node info says whether this node runs it)")
	f.StringVar(&vm.Kernel, "kernel", "", "micro-VM: the guest kernel")
	f.StringVar(&vm.Initramfs, "initramfs", "", "micro-VM: the guest's initramfs, whose /init is stasis-agent (stasis-agent initramfs writes one)")
	f.StringSliceVar(&vm.Cmdline, "cmdline", nil, "micro-VM: kernel parameters added to the console's (repeatable)")
	f.IntVar(&vm.CPUs, "cpus", 0, "micro-VM: virtual CPUs (default 1)")
	f.StringArrayVar(&devices, "vm-device", nil, "micro-VM: a PCI device, ID=DRIVER[,host=PCI-ADDRESS] (vfio-pci for a GPU passed through; repeatable)")
	f.StringVar(&t.Image, "image", "", "container image the actors run: an OCI image layout folder or a docker save / podman save tarball on stasisd's node (args after -- replace its cmd)")
	f.StringArrayVar(&mounts, "mount", nil, "a host folder bound into each actor, SOURCE:TARGET[:ro|rw] (read-only unless rw; repeatable), within the host path policy (rw needs a folder stasisd allows read-write: --host-path DIR:rw)")
	f.StringVar(&t.Bundle, "bundle", "", "OCI bundle folder the actors run")
	f.StringVar(&t.Rootfs, "rootfs", "", "root filesystem folder; the process is given after --")
	f.StringSliceVar(&t.Env, "env", nil, "environment variables (KEY=VALUE, repeatable)")
	f.IntVar(&t.GPUs, "gpus", 0, "GPUs per actor (the node's NVIDIA devices and the stasis-cuda helper)")
	f.StringVar(&memory, "memory", "", "sandbox memory limit, such as 16GiB (stasis plan template recommends one)")
	f.StringSliceVar(&t.Durable, "durable", nil, "folders inside the sandbox kept on the host per actor (repeatable)")
	f.StringSliceVar(&t.Probe.Command, "probe-cmd", nil, "readiness command run in the sandbox, its argv comma-separated: python3,/app/get.py (or sh,-c,'python3 /app/get.py')")
	f.StringVar(&t.Probe.URL, "probe-url", "", "readiness URL that must answer 2xx")
	f.Float64Var(&probeTimeout, "probe-timeout", 30, "seconds to wait for readiness")
	f.StringArrayVarP(&publish, "publish", "p", nil, "publish a port of every actor, as docker run -p: [HOSTIP:]HOSTPORT:PORT (TCP; PORT alone: a free host port for each actor; repeatable)")
	f.StringVar(&t.Network.Mode, "network", "", "the actors' network: cni, netns (with --netns), host or none (default: cni where CNI is installed, none otherwise)")
	f.StringVar(&t.Network.Netns, "netns", "", "the network namespace the actors join, for --network netns")
	f.StringVar(&idleAfter, "idle-after", "", "pause or suspend (--idle-then) an actor nothing used for this long, such as 10m: no connection through its published ports, no exec")
	f.StringVar(&idleThen, "idle-then", api.IdleSuspend, "what an idle actor becomes: pause or suspend")
	f.StringVar(&t.WakeTimeout, "wake-timeout", "", "how long a connection for a paused or suspended actor is held while it wakes (default 2m)")
	f.StringVar(&t.Restart, "restart", "", "what happens to an actor whose process ends on its own, as docker's --restart: never (default), on-failure (an exit code other than 0, or a signal) or always; it is booted again from the template, with a pause that doubles between quick restarts (100ms up to 1m)")
	f.StringVar(&onPause, "on-pause", "Full", "scope of pause snapshots: Full or Data")
	f.StringVar(&onCommit, "on-commit", "Full", "scope of suspend (commit) snapshots: Full or Data")

	var requestID string
	warm := &cobra.Command{
		Use:   "warm NAME",
		Short: "Boot an actor of the template, wait until ready, and keep its Full snapshot as the template's golden snapshot",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := api.WarmRequest{Template: args[0], RequestID: requestID}
			var got api.Template
			err := g.follow(cmd.Context(), api.WarmingActorID(req), func(ctx context.Context) (err error) {
				got, err = g.client().WarmTemplate(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return g.print(got, describeTemplate(got))
		},
	}
	warm.Flags().StringVar(&requestID, "request-id", "", "makes a retry harmless")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := g.client().ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "TEMPLATE\tRUNTIME\tGPUS\tMEMORY\tPAUSE\tCOMMIT\tGOLDEN")
			for _, t := range list {
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, cmp.Or(t.Runtime, api.RuntimeGVisor), t.GPUs, limit(t.MemoryBytes), t.Snapshots.OnPause, t.Snapshots.OnCommit, orDash(t.Golden))
			}
			w.Flush()
			if list == nil {
				list = []api.Template{}
			}
			return g.print(list, b.String())
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a template no actor uses, with its golden snapshot (here and in the store)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.client().DeleteTemplate(cmd.Context(), args[0]); err != nil {
				return err
			}
			return g.print(map[string]any{"template": args[0], "deleted": true}, fmt.Sprintf("deleted template %s\n", args[0]))
		},
	}
	cmd.AddCommand(create, warm, ls, rm)
	return cmd
}

// absolute makes a path given relative to the working folder absolute, as
// stasisd, elsewhere, needs it.
func absolute(p *string) error {
	if *p == "" || filepath.IsAbs(*p) {
		return nil
	}
	abs, err := filepath.Abs(*p)
	*p = abs
	return err
}

// parseVMDevice reads ID=DRIVER[,host=ADDRESS].
func parseVMDevice(s string) (api.Device, error) {
	id, rest, ok := strings.Cut(s, "=")
	driver, props, _ := strings.Cut(rest, ",")
	d := api.Device{ID: id, Driver: driver}
	if !ok || id == "" || driver == "" {
		return d, fmt.Errorf("--vm-device %q: want ID=DRIVER[,host=PCI-ADDRESS], such as gpu0=vfio-pci,host=0000:3b:00.0", s)
	}
	if props != "" {
		k, v, ok := strings.Cut(props, "=")
		if !ok {
			return d, fmt.Errorf("--vm-device %q: property %q: want KEY=VALUE", s, props)
		}
		d.Props = map[string]string{k: v}
	}
	return d, nil
}

func describeTemplate(t api.Template) string {
	source := "bundle " + t.Bundle
	switch {
	case t.Bundle != "":
	case t.VM != nil:
		source = fmt.Sprintf("kernel %s, initramfs %s, args %q", t.VM.Kernel, t.VM.Initramfs, t.Args)
	default:
		source = fmt.Sprintf("rootfs %s, args %q", t.Rootfs, t.Args)
	}
	if t.Image != "" {
		source = fmt.Sprintf("image %s (unpacked into %s)", t.Image, t.Bundle)
	}
	source = cmp.Or(t.Runtime, api.RuntimeGVisor) + ", " + source
	serve := ""
	if t.Network.Mode != "" {
		serve += "; network " + t.Network.Mode
	}
	if len(t.Ports) > 0 {
		serve += "; publishes " + portList(t.Ports)
	}
	if t.Idle != nil {
		serve += fmt.Sprintf("; idle %s: %s", t.Idle.After, t.Idle.Then)
	}
	for _, m := range t.Mounts {
		mode := "ro"
		if m.ReadWrite {
			mode = "rw"
		}
		serve += fmt.Sprintf("; mounts %s at %s (%s)", m.Source, m.Target, mode)
	}
	if t.Restart != "" && t.Restart != api.RestartNever {
		serve += "; restart " + t.Restart
	}
	return fmt.Sprintf("template %s: %s; %d GPU(s), memory %s, durable %v; snapshots on pause %s, on commit %s; golden %s%s\n",
		t.Name, source, t.GPUs, limit(t.MemoryBytes), t.Durable, t.Snapshots.OnPause, t.Snapshots.OnCommit, orDash(t.Golden), serve)
}

func limit(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return units.Bytes(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// checkProbeCommand refuses a probe command given as one string of words
// (--probe-cmd 'python3 /app/get.py'): it would run a program of that
// whole name, never found, and the actor would wait out its probe.
func checkProbeCommand(argv []string) error {
	if len(argv) == 1 && strings.ContainsAny(argv[0], " \t") {
		fix := strings.Join(strings.Fields(argv[0]), ",")
		return errdefs.Mark(fmt.Errorf("--probe-cmd %q: the probe's argv is comma-separated, so this is one program named %q; write --probe-cmd %s (or sh,-c,%q)", argv[0], argv[0], fix, argv[0]), errdefs.ErrInvalidArgument)
	}
	return nil
}
