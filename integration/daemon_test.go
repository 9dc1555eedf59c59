package integration

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/runtime/gvisor"
	"github.com/stasis-run/stasis/testkit/testactor"
	"github.com/stasis-run/stasis/testkit/vmtest"
)

// These tests start the real stasisd binary on a fresh data folder and drive
// real runsc sandboxes through its API: they need root and runsc.

// program is a command of this module, built once for all the tests that
// run it.
type program struct {
	name, pkg string
	once      sync.Once
	bin       string
	err       error
}

var stasisd, stasisCLI = &program{name: "stasisd", pkg: "../cmd/stasisd"}, &program{name: "stasis", pkg: "../cmd/stasis"}

// programs is the folder every program is built into, made by the first.
var programs struct {
	once sync.Once
	dir  string
	err  error
}

// TestMain removes, after the tests, the programs they built, the micro-VM
// guest and the test actors.
func TestMain(m *testing.M) {
	testactor.Main(m, vmtest.RemoveGuest, func() {
		if programs.dir != "" {
			os.RemoveAll(programs.dir)
		}
	})
}

func (p *program) path(t *testing.T) string {
	t.Helper()
	p.once.Do(func() {
		programs.once.Do(func() { programs.dir, programs.err = os.MkdirTemp("", "stasis-programs-") })
		if programs.err != nil {
			p.err = programs.err
			return
		}
		p.bin = filepath.Join(programs.dir, p.name)
		if out, err := exec.Command("go", "build", "-o", p.bin, p.pkg).CombinedOutput(); err != nil {
			p.err = errors.New(string(out))
		}
	})
	if p.err != nil {
		t.Fatalf("build %s: %v", p.name, p.err)
	}
	return p.bin
}

type daemon struct {
	t      *testing.T
	data   string
	socket string
	cmd    *exec.Cmd
	exited chan error
	log    *strings.Builder
	logMu  sync.Mutex
	api    *api.Client
	rt     *gvisor.Runsc
	extra  []string
	// args, when set, are stasisd's whole command line (the one a Helm
	// rendering gives), in place of the tests' own.
	args []string
}

func newDaemon(t *testing.T, extra ...string) *daemon {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the stasisd tests run real runsc sandboxes and need root")
	}
	data := t.TempDir()
	d := &daemon{t: t, data: data, socket: filepath.Join(data, "stasisd.sock"), log: &strings.Builder{}, extra: extra}
	rt, err := gvisor.New(context.Background(), gvisor.Config{Root: filepath.Join(data, "runsc"), Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	d.rt = rt
	d.api = api.Dial(d.socket)
	t.Cleanup(func() {
		d.stop()
		// Whatever a test left behind: no sandbox may outlive it. Each
		// runsc process of this daemon names its state folder.
		_ = killProcesses(func(cmdline string) bool { return strings.Contains(cmdline, filepath.Join(data, "runsc")) })
		testactor.UnpinNetNS(filepath.Join(data, "runsc"))
		releaseNetworks(t, data)
		if t.Failed() {
			t.Logf("stasisd log:\n%s", d.logText())
		}
	})
	return d
}

func (d *daemon) logText() string {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	return d.log.String()
}

func (d *daemon) command(failpoint string) *exec.Cmd {
	// The test actors' bundles are made under the temporary folder.
	args := append([]string{"--data", d.data, "--socket", d.socket, "--network", "none", "--log-format", "text", "--host-path", os.TempDir()}, d.extra...)
	if d.args != nil {
		args = d.args
	}
	cmd := exec.Command(stasisd.path(d.t), args...)
	cmd.Env = append(os.Environ(), "STASIS_FAILPOINT="+failpoint)
	return cmd
}

// startQuiet runs a stasisd whose log goes to a file (--log-file) and
// returns once it answers on its socket.
func (d *daemon) startQuiet() {
	d.t.Helper()
	cmd := d.command("")
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.cmd, d.exited = cmd, make(chan error, 1)
	go func() { d.exited <- cmd.Wait() }()
	waitFor(d.t, "stasisd to answer", func() bool {
		_, err := d.api.ListActors(context.Background())
		return err == nil
	})
}

// start runs stasisd and returns once it serves, as its log says.
func (d *daemon) start(failpoint string) {
	d.t.Helper()
	cmd := d.command(failpoint)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		d.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			d.logMu.Lock()
			d.log.WriteString(sc.Text() + "\n")
			d.logMu.Unlock()
			if !said && strings.Contains(sc.Text(), "stasisd serving") {
				said = true
				serving <- true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		if !said {
			serving <- false
		}
	}()
	d.cmd, d.exited = cmd, make(chan error, 1)
	if !<-serving {
		// Its output is read to the end, so it can be reaped here; stop
		// then has nothing to wait for.
		_ = cmd.Wait()
		d.cmd = nil
		d.t.Fatalf("stasisd did not start:\n%s", d.logText())
	}
	go func() { d.exited <- cmd.Wait() }()
}

// stop ends stasisd with SIGTERM, as a service manager would.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	<-d.exited
	d.cmd = nil
}

// crashed waits for stasisd to die by its failpoint's SIGKILL.
func (d *daemon) crashed() {
	d.t.Helper()
	err := <-d.exited
	d.cmd = nil
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		d.t.Fatalf("stasisd ended with %v, not by its failpoint's SIGKILL\n%s", err, d.logText())
	}
}

// template records the counter actor's template.
func (d *daemon) template(name string, tweak func(*api.Template)) api.Template {
	d.t.Helper()
	dir := testactor.Bundle(d.t, d.t.TempDir(), testactor.Options{})
	t := api.Template{Name: name, Bundle: dir, Durable: []string{"/state"}, Probe: api.Probe{Command: []string{"/counter", "await", "get"}, TimeoutSeconds: 30}}
	if tweak != nil {
		tweak(&t)
	}
	got, err := d.api.CreateTemplate(context.Background(), t)
	if err != nil {
		d.t.Fatal(err)
	}
	return got
}

func (d *daemon) run(template, id string) api.Actor {
	d.t.Helper()
	a, err := d.api.Run(context.Background(), api.RunRequest{Template: template, ID: id})
	if err != nil {
		d.t.Fatalf("run %s: %v", id, err)
	}
	if a.State != api.Running {
		d.t.Fatalf("run %s: %+v", id, a)
	}
	return a
}

func (d *daemon) op(verb, id string) api.Actor {
	d.t.Helper()
	a, err := call(context.Background(), d.api, verb, id)
	if err != nil {
		d.t.Fatalf("%s %s: %v", verb, id, err)
	}
	return a
}

// call runs the operation verb (Pause, Suspend, Resume or Delete) on
// actor id.
func call(ctx context.Context, c *api.Client, verb, id string) (api.Actor, error) {
	switch verb {
	case "Pause":
		return c.Pause(ctx, api.OpRequest{ID: id})
	case "Suspend":
		return c.Suspend(ctx, api.OpRequest{ID: id})
	case "Resume":
		return c.Resume(ctx, api.OpRequest{ID: id})
	case "Delete":
		_, err := c.Delete(ctx, api.DeleteRequest{ID: id})
		return api.Actor{ID: id, State: api.Deleting}, err
	}
	panic("unknown operation " + verb)
}

func (d *daemon) inspect(id string) api.Actor {
	d.t.Helper()
	a, err := d.api.InspectActor(context.Background(), id)
	if err != nil {
		d.t.Fatalf("inspect %s: %v", id, err)
	}
	return a
}

// counter runs "/counter await CMD" in actor id's sandbox.
func (d *daemon) counter(id, cmd string) string {
	d.t.Helper()
	res, err := d.rt.Exec(context.Background(), api.SandboxID(id), runtime.Process{Args: []string{"/counter", "await", cmd}})
	if err != nil || res.ExitCode != 0 {
		d.t.Fatalf("counter %s in %s: %v exit %d: %s", cmd, id, err, res.ExitCode, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

// requireNoSandbox fails unless actor id has no sandbox.
func (d *daemon) requireNoSandbox(id string) {
	d.t.Helper()
	if _, err := d.rt.State(context.Background(), api.SandboxID(id)); !errors.Is(err, runtime.ErrNotFound) {
		d.t.Fatalf("sandbox %s still exists: %v", id, err)
	}
}

// envInt is the positive number in environment variable key, def when it
// is unset: the tests' knobs (iterations, sizes).
func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", key, v)
	}
	return n
}
