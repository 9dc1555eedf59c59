// Command stasisd is Stasis's node service: actors made from templates,
// suspended, paused and resumed through an API on a unix socket, with every
// operation journaled in SQLite so that no actor is ever left half-way
// (docs/service.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spf13/cobra"

	"github.com/stasis-run/stasis/cmd/internal/compose"
	"github.com/stasis-run/stasis/fingerprint"
	"github.com/stasis-run/stasis/internal/buildinfo"
	"github.com/stasis-run/stasis/internal/fencefile"
	"github.com/stasis-run/stasis/internal/fsutil"
	"github.com/stasis-run/stasis/internal/units"
	"github.com/stasis-run/stasis/network"
	"github.com/stasis-run/stasis/node"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/service/hostpolicy"
	"github.com/stasis-run/stasis/service/server"
	"github.com/stasis-run/stasis/store"
)

// options are stasisd's own settings beside the shared ones.
type options struct {
	compose.Options
	socketMode, helper, logFormat, logFile string
	metricsAddr                            string
	hugePages, keepPaused, keepReserve     string
	stageBudget, consoleMaxSize            string
	consoleFiles                           int
	hostPaths, deadlines                   []string
	noStore, allowHostRoot, pullWhole      bool
	microVM                                compose.MicroVMOptions
	cni                                    network.CNIConfig
	maxHeld                                int
}

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "stasisd:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var o options
	var config string
	cmd := &cobra.Command{
		Use:   "stasisd",
		Short: "Stasis's node service: actors suspended and resumed, GPU state included, through an API on a unix socket",
		Long: `stasisd keeps templates, actors, snapshots and operations in a SQLite journal under
its data folder, drives actors through their lifecycle and serves the API on a unix
socket (docs/service.md). Settings come from flags, or from a config file of
"name = value" lines naming the same flags (--config; flags given on the command
line win).`,
		Version:       buildinfo.Version(),
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config != "" {
				if err := applyConfig(cmd.Flags(), config); err != nil {
					return err
				}
			}
			if err := o.AbsolutePaths(); err != nil {
				return err
			}
			log, closeLog, err := o.logger()
			if err != nil {
				return err
			}
			defer closeLog()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := serve(ctx, o, log); err != nil {
				// Standard error says it once (main); a log file keeps it
				// too.
				if o.logFile != "" {
					log.Error("stasisd stopped", "error", err.Error())
				}
				return err
			}
			return nil
		},
	}
	cmd.SetVersionTemplate("stasisd {{.Version}}\n")
	f := cmd.Flags()
	o.Options.Register(f)
	o.microVM.RegisterMicroVM(f)
	f.StringVar(&config, "config", "", "config file of \"name = value\" lines, one per flag (see packaging/stasisd.conf)")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics and /healthz (only those) over TCP at this address, such as :9464 or 127.0.0.1:9464, for Prometheus and health checks; off when empty (both are on the socket too)")
	f.StringVar(&o.socketMode, "socket-mode", "0600", "permissions of the socket (octal); whoever can open it can run sandboxes (docs/service.md, trust model)")
	f.BoolVar(&o.noStore, "no-store", false, "keep every snapshot on this node; suspend stores nothing")
	f.StringVar(&o.helper, "helper", "", "stasis-cuda on this host, mounted into GPU actors (default: stasis-cuda next to stasisd)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logFile, "log-file", "", "append the log to this file (made 0600) instead of standard error")
	f.StringArrayVar(&o.hostPaths, "host-path", nil, "a host folder templates may use (their bundle, rootfs and bind mounts): PATH, or PATH:rw to allow read-write mounts; repeatable, added to /usr, /opt and DATA/templates (read-only)")
	f.BoolVar(&o.allowHostRoot, "allow-host-root", false, "let templates use the host's / as a rootfs or mount it")
	f.StringVar(&o.hugePages, "sandbox-huge-pages", "enable", "enable: at start, set the host's transparent huge page settings runsc needs to back sandbox memory with huge pages (shmem_enabled advise, defrag defer; restores load memory about 3x faster), where they do not allow it; keep: leave them and only warn (docs/service.md)")
	f.StringVar(&o.keepPaused, "keep-paused", "auto", "auto: a paused actor's sandbox stays in memory, frozen, its GPU released, while the node has --keep-paused-reserve available, so that its resume loads nothing (its snapshot is on disk all the same); never: every pause stops its sandbox")
	f.StringVar(&o.keepReserve, "keep-paused-reserve", "", "memory that must stay available with the paused sandboxes kept (such as 16GiB); below it the longest paused are stopped and resume from their snapshots (default: a quarter of the node's memory)")
	f.StringVar(&o.consoleMaxSize, "console-max-size", "10MiB", "size over which an actor's console log (DATA/actors/ID/console.log, what `stasis actor logs` reads) is rotated")
	f.IntVar(&o.consoleFiles, "console-files", service.DefaultConsoleFiles, "files an actor's console log keeps, the one being written among them (1: it is only cut)")
	f.StringVar(&o.stageBudget, "stage-budget", "", "disk the staged copies of stored snapshots may take (such as 200GiB; 0 turns staging off): whole copies made before an actor needs them (a fleet agent stages its templates' golden snapshots), the least recently used making room (default: a quarter of the data folder's disk)")
	f.BoolVar(&o.pullWhole, "pull-whole", false, "pull a stored snapshot whole before restoring it; by default runsc restores it through a read-only FUSE view of the folder while it is pulled, each read waiting for its hash-checked bytes (without FUSE the pull is whole first)")
	f.StringArrayVar(&o.deadlines, "deadline", nil, "KIND=DURATION: how long an operation of a kind may run before it is rolled back (kinds: run, pause, suspend, resume, delete, golden, release); repeatable")
	f.StringVar(&o.cni.ConfDir, "cni-conf-dir", "/etc/cni/net.d", "where the operator's CNI network configuration lists are (docs/service.md, \"Networking\")")
	f.StringVar(&o.cni.Network, "cni-network", network.DefaultNetwork, "the CNI network actors join (network mode cni): a list of that name in --cni-conf-dir, or for stasis when there is none Stasis's own (a bridge stasis0 on 10.89.0.0/16)")
	f.StringSliceVar(&o.cni.BinDirs, "cni-bin-dir", network.DefaultBinDirs, "where the CNI plugins are (scripts/install-cni.sh installs them in the first)")
	f.DurationVar(&o.cni.Timeout, "cni-timeout", network.DefaultCNITimeout, "how long the CNI plugins may take to attach or detach an actor before they are stopped and its run, resume or delete fails")
	f.IntVar(&o.maxHeld, "max-held-connections", service.DefaultMaxHeldConnections, "connections an actor's published ports hold at most while it wakes; more are refused")
	cmd.AddCommand(newWatchdog())
	// Older stasisd took single-dash flags (-data); they still work.
	cmd.SetArgs(doubleDash(os.Args[1:], f))
	return cmd
}

// networks is what sets the actors' networks up: with runsc's own network
// (--network sandbox, the default) each actor gets a namespace of its own;
// with --network host or none runsc gives every sandbox that.
func (o options) networks(log *slog.Logger) (*network.Manager, error) {
	cni := o.cni
	cni.CacheDir = filepath.Join(o.DataDir, "cni")
	m, err := network.New(network.Config{Runsc: o.Runsc.Network, NetnsDir: filepath.Join(o.DataDir, "netns"), CNI: cni})
	if err != nil {
		return nil, err
	}
	switch err := m.CNIError(); {
	case o.Runsc.Network != "" && o.Runsc.Network != "sandbox":
		log.Info("every actor has runsc's network", "network", o.Runsc.Network)
	case err != nil:
		log.Info("actors get a loopback alone unless their template names a namespace: CNI cannot be used", "reason", err.Error())
	default:
		log.Info("actors join the CNI network by default", "network", cni.Network)
	}
	return m, nil
}

func (o options) logger() (*slog.Logger, func(), error) {
	var w io.Writer = os.Stderr
	closeLog := func() {}
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		w, closeLog = f, func() { f.Close() }
	}
	var handler slog.Handler
	switch o.logFormat {
	case "json":
		handler = slog.NewJSONHandler(w, nil)
	case "text":
		handler = slog.NewTextHandler(w, nil)
	default:
		closeLog()
		return nil, nil, fmt.Errorf("--log-format %q: want json or text", o.logFormat)
	}
	return slog.New(handler), closeLog, nil
}

func serve(ctx context.Context, o options, log *slog.Logger) error {
	if uid := os.Geteuid(); uid != 0 {
		// Refused before anything is made: runsc would fail at the first
		// sandbox (its cgroup), after the data folder was made.
		return fmt.Errorf("stasisd runs as uid %d and needs root: it drives runsc, which makes each sandbox's cgroup, namespaces and mounts as root (rootless sandboxes are not supported); start it as root (sudo stasisd, or the Debian package's systemd unit), and give other users the API through --socket-mode", uid)
	}
	// Everything stasisd writes (the journal, images of process memory,
	// logs) is its own, whatever the umask it was started with; runsc,
	// which it starts, inherits this.
	syscall.Umask(0o077)
	if o.hugePages != "enable" && o.hugePages != "keep" {
		return fmt.Errorf("--sandbox-huge-pages %q: want enable or keep", o.hugePages)
	}
	mode, err := strconv.ParseUint(o.socketMode, 8, 32)
	if err != nil {
		return fmt.Errorf("--socket-mode %q: want octal permissions such as 0600", o.socketMode)
	}
	deadlines, err := service.ParseDeadlines(o.deadlines)
	if err != nil {
		return fmt.Errorf("--deadline: %w", err)
	}
	keep, err := o.keepPolicy()
	if err != nil {
		return err
	}
	stageBudget, err := o.stageBudgetBytes()
	if err != nil {
		return err
	}
	consoleLimits, err := o.consoleLimits()
	if err != nil {
		return err
	}
	policy := hostpolicy.Policy{Paths: hostpolicy.Defaults(o.TemplatesDir()), AllowRoot: o.allowHostRoot, DataDir: o.DataDir, TemplatesDir: o.TemplatesDir()}
	for _, p := range o.hostPaths {
		hp, err := hostpolicy.ParsePath(p)
		if err != nil {
			return fmt.Errorf("--host-path: %w", err)
		}
		policy.Paths = append(policy.Paths, hp)
	}
	// Refused before the data folder is made or its journal read.
	if serving(o.Socket) {
		return fmt.Errorf("another stasisd is serving on %s: stop it, or give this one another --socket (and --data)", o.Socket)
	}
	release, err := o.LockDaemon()
	if err != nil {
		return err
	}
	defer release()
	sandboxHugePages(o.hugePages == "enable", node.HugePagesDir, log)
	eng, err := o.Engine(ctx)
	if err != nil {
		return err
	}
	vmEngine, noVM, err := o.MicroVMEngine(ctx, o.microVM)
	if err != nil {
		return err
	}
	if vmEngine != nil {
		// Logged once the accelerator is chosen: its probe boots a guest
		// kernel, which stasisd does not wait for to serve.
		go func() {
			var notes []string
			if n, ok := vmEngine.Runtime.(interface{ Notes() []string }); ok {
				notes = n.Notes()
			}
			log.Info("micro-VM actors run here", "runtime", vmEngine.Runtime.Info(), "notes", notes)
		}()
	} else {
		log.Info("no micro-VM actors on this node", "reason", noVM)
	}
	// The store is opened once stasisd is up, and again in the background
	// while it is out of reach: stasisd serves whatever state it is in.
	var openStore func(context.Context) (*store.Repository, error)
	storeAt := ""
	if !o.noStore {
		storeAt = o.RepoLocation()
		openStore = func(ctx context.Context) (*store.Repository, error) {
			repo, err := o.OpenRepo(ctx)
			if err != nil {
				return nil, err
			}
			for _, d := range repo.DamagedIndexes() {
				log.Warn("the store has a damaged index: snapshots that need its chunks are refused, and gc will not run until it is fixed", "object", d.Object, "reason", d.Reason)
			}
			return repo, nil
		}
	}
	runsc, _ := eng.Runtime.(interface {
		NvproxyNotice() string
		Path() string
	})
	runscPath := ""
	if runsc != nil {
		runscPath = runsc.Path()
		if n := runsc.NvproxyNotice(); n != "" {
			log.Warn(n)
		}
	}
	networks, err := o.networks(log)
	if err != nil {
		return err
	}
	svc, err := service.New(ctx, service.Config{
		DataDir:            o.DataDir,
		Engine:             eng,
		MicroVM:            vmEngine,
		MicroVMUnavailable: noVM,
		OpenStore:          openStore,
		StoreLocation:      storeAt,
		Helper:             helperPath(o.helper),
		Log:                log,
		Failpoint:          os.Getenv("STASIS_FAILPOINT"),
		FenceFile:          fencefile.Path(o.DataDir),
		Watchdog:           startWatchdog(o.DataDir),
		Deadlines:          deadlines,
		HostPaths:          policy,
		KeepPaused:         keep,
		StageBudget:        stageBudget,
		PullWhole:          o.pullWhole,
		Network:            networks,
		MaxHeldConnections: o.maxHeld,
		Console:            consoleLimits,
		Node: func(ctx context.Context) (fingerprint.Fingerprint, error) {
			return eng.Fingerprint(ctx)
		},
	})
	if err != nil {
		return err
	}
	defer svc.Close()
	start := time.Now()
	if err := svc.Reconcile(ctx); err != nil {
		return err
	}
	log.Info("journal reconciled", "duration", time.Since(start).String())
	if err := svc.OpenStore(ctx, storeOpenTimeout); err != nil {
		log.Warn("the snapshot store is out of reach: stasisd serves without it, keeps its snapshots on this node and keeps trying the store", "store", o.RepoLocation(), "error", err.Error())
	}
	svc.KeepOpeningStore(ctx)
	// A fleet lease that lapsed while stasisd was down fences before
	// anything is served.
	if err := svc.EnforceLease(ctx); err != nil {
		return err
	}
	svc.KeepFencing(ctx, service.DefaultFenceCheck)
	svc.KeepReleasing(ctx, service.DefaultKeepCheck)
	svc.KeepIdling(ctx, service.DefaultIdleCheck)
	svc.KeepWatchingExits(ctx, service.DefaultExitCheck)
	svc.KeepConsoles(ctx, service.DefaultConsoleLook)
	ln, err := listen(o.Socket, os.FileMode(mode))
	if err != nil {
		return err
	}
	metricsSrv, err := serveMetrics(o.metricsAddr, svc, log)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: server.Handler(svc), Protocols: server.Protocols(), ReadHeaderTimeout: 10 * time.Second}
	// Watches of actors' histories and interactive execs have no end of
	// their own.
	srv.RegisterOnShutdown(svc.StopWatching)
	srv.RegisterOnShutdown(svc.EndExecs)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		// Operations in flight run to their end (their handlers wait for
		// them); the listener closes now.
		log.Info("stasisd stopping: no new requests; operations in flight run to their end, commands run by exec are ended")
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if metricsSrv != nil {
			_ = metricsSrv.Close()
		}
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("stasisd serving", "socket", o.Socket, "data", o.DataDir, "runsc", runscPath, "runtime", eng.Runtime.Info(), "runscRoot", o.RunscRoot(), "store", svc.StoreStatus().Location, "hostPaths", policy.Paths, "version", buildinfo.Version())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-stopped
	log.Info("stasisd stopped")
	return nil
}

// serveMetrics serves /metrics and /healthz alone over TCP at addr, when
// set, until the returned server is closed.
func serveMetrics(addr string, svc *service.Service, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (give a free host:port, or leave it unset)", addr, err)
	}
	srv := &http.Server{Handler: server.MetricsHandler(svc), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "addr", addr, "error", err.Error())
		}
	}()
	log.Info("metrics served over TCP", "addr", ln.Addr().String(), "paths", "/metrics /healthz")
	return srv, nil
}

// keepPolicy reads --keep-paused and --keep-paused-reserve.
func (o options) keepPolicy() (*service.KeepPolicy, error) {
	switch o.keepPaused {
	case "never":
		return nil, nil
	case "auto":
	default:
		return nil, fmt.Errorf("--keep-paused %q: want auto or never", o.keepPaused)
	}
	p := &service.KeepPolicy{}
	if o.keepReserve != "" {
		n, err := units.ParseBytes(o.keepReserve)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--keep-paused-reserve %q: want a size such as 16GiB", o.keepReserve)
		}
		p.Reserve = n
	}
	return p, nil
}

// stageBudgetBytes reads --stage-budget: a quarter of the data folder's
// disk when not given.
func (o options) stageBudgetBytes() (int64, error) {
	if o.stageBudget == "" {
		// The data folder may not exist yet: its nearest folder that does
		// is on the same disk.
		var fs unix.Statfs_t
		dir := o.DataDir
		for unix.Statfs(dir, &fs) != nil {
			if parent := filepath.Dir(dir); parent != dir {
				dir = parent
				continue
			}
			return 0, fmt.Errorf("--stage-budget: cannot tell the size of the disk of %s: give one", o.DataDir)
		}
		return int64(fs.Blocks) * fs.Bsize / 4, nil
	}
	n, err := units.ParseBytes(o.stageBudget)
	if err != nil || n > 1<<62 {
		return 0, fmt.Errorf("--stage-budget %q: want a size such as 200GiB, or 0 to turn staging off", o.stageBudget)
	}
	return int64(n), nil
}

// consoleLimits reads --console-max-size and --console-files.
func (o options) consoleLimits() (service.ConsoleLimits, error) {
	n, err := units.ParseBytes(o.consoleMaxSize)
	if err != nil || n < 4<<10 || n > 1<<50 {
		return service.ConsoleLimits{}, fmt.Errorf("--console-max-size %q: want a size from 4KiB up, such as 10MiB", o.consoleMaxSize)
	}
	if o.consoleFiles < 1 || o.consoleFiles > 100 {
		return service.ConsoleLimits{}, fmt.Errorf("--console-files %d: want 1 to 100 (1 keeps only the file being written, cut when over --console-max-size)", o.consoleFiles)
	}
	return service.ConsoleLimits{MaxSize: int64(n), Files: o.consoleFiles}, nil
}

// sandboxHugePages applies --sandbox-huge-pages before any sandbox starts:
// runsc reads the settings when it creates a sandbox's memory. A host whose
// settings cannot be changed (a read-only /sys, shmem_enabled deny) still
// runs sandboxes, in 4 KiB pages, and the log says so.
func sandboxHugePages(enable bool, dir string, log *slog.Logger) {
	if !enable {
		h, err := node.ReadHugePages(dir)
		if err != nil {
			log.Warn("cannot read the host's huge page settings", "error", err.Error())
		} else if !h.Sandbox {
			log.Warn(h.String() + " (--sandbox-huge-pages keep)")
		}
		return
	}
	before, after, err := node.EnableSandboxHugePages(dir)
	switch {
	case err != nil:
		log.Warn("sandbox memory stays in 4 KiB pages: restores load memory about 3x slower", "error", err.Error())
	case before != after:
		log.Info("transparent huge pages set so that runsc backs sandbox memory with huge pages", "before", before.ShmemEnabled+"/"+before.Defrag, "after", after.ShmemEnabled+"/"+after.Defrag, "settings", "shmem_enabled/defrag")
	}
}

// serving says whether something answers on the unix socket at path.
func serving(path string) bool {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// listen opens the socket, replacing a stale one but never a live one, nor
// anything that is not a socket.
func listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("--socket %s exists and is not a socket (it is %s); it is left alone: pick another path", path, fsutil.DescribeType(st.Mode()))
		}
		if serving(path) {
			return nil, fmt.Errorf("another stasisd is serving on %s: stop it, or give this one another --socket (and --data)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket permissions: %w", err)
	}
	return ln, nil
}

// helperPath is the configured helper, or stasis-cuda next to stasisd.
// storeOpenTimeout bounds the first try to open the store at start.
const storeOpenTimeout = 20 * time.Second

func helperPath(configured string) string {
	if configured != "" {
		return configured
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	next := filepath.Join(filepath.Dir(self), "stasis-cuda")
	if _, err := os.Stat(next); err != nil {
		return ""
	}
	return next
}
