package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/bundle"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/runtime"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/service/hostpolicy"
	"github.com/stasis-run/stasis/store"
	"github.com/stasis-run/stasis/store/local"
	"github.com/stasis-run/stasis/testkit/runtimetest"
	"github.com/stasis-run/stasis/testkit/testdisk"
)

// These tests drive the service over a fake runtime (no sandbox, no
// root): every transition, the request-id and busy rules, deadlines and
// the reconcile branches, in seconds. The same behaviours are checked
// against real stasisd and runsc in cmd/stasisd.

type env struct {
	t    *testing.T
	rt   *runtimetest.Runtime
	svc  *service.Service
	cfg  service.Config
	host string // the folder templates' bundles live in
}

func newEnv(t *testing.T, tweak func(*service.Config)) *env {
	t.Helper()
	e := &env{t: t, rt: runtimetest.New(), host: t.TempDir()}
	be, err := local.New(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	repo, err := store.Init(context.Background(), be)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	e.cfg = service.Config{
		DataDir:   data,
		Engine:    &engine.Engine{Runtime: e.rt},
		Repo:      repo,
		HostPaths: hostpolicy.Policy{Paths: []hostpolicy.Path{{Path: e.host}}, DataDir: data, TemplatesDir: filepath.Join(data, "templates")},
	}
	if tweak != nil {
		tweak(&e.cfg)
	}
	e.open()
	return e
}

// open starts the service on the data folder, reconciled, as stasisd does.
func (e *env) open() {
	e.t.Helper()
	svc, err := service.New(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := svc.Reconcile(context.Background()); err != nil {
		e.t.Fatalf("reconcile: %v", err)
	}
	e.svc = svc
	e.t.Cleanup(func() { svc.Close() })
}

// restart is a crash and a new start: the journal as it was written, the
// sandboxes as the fake runtime has them.
func (e *env) restart() {
	e.t.Helper()
	e.svc.Close()
	e.open()
}

// bundle writes an OCI bundle under the host folder.
func (e *env) bundle(tweak func(*specs.Spec)) string {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.host, "bundle")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	spec := &specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/counter", "serve"}, Cwd: "/"}, Root: &specs.Root{Path: "rootfs"}}
	if tweak != nil {
		tweak(spec)
	}
	if err := bundle.Save(dir, spec); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

func (e *env) template(name string, tweak func(*api.Template)) api.Template {
	e.t.Helper()
	t := api.Template{Name: name, Bundle: e.bundle(nil), Probe: api.Probe{Command: []string{"true"}}}
	if tweak != nil {
		tweak(&t)
	}
	got, err := e.svc.CreateTemplate(context.Background(), t)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) run(id string) api.Actor {
	e.t.Helper()
	a, err := e.svc.Run(context.Background(), api.RunRequest{Template: "t", ID: id})
	if err != nil || a.State != api.Running {
		e.t.Fatalf("run %s: %+v %v", id, a, err)
	}
	return a
}

// counter runs "/counter await incr" (or get) in the actor's sandbox.
func (e *env) counter(id, verb string) string {
	e.t.Helper()
	res, err := e.svc.Exec(context.Background(), api.ExecRequest{ID: id, Args: []string{"/counter", "await", verb}})
	if err != nil || res.ExitCode != 0 {
		e.t.Fatalf("counter %s in %s: %+v %v", verb, id, res, err)
	}
	return strings.TrimSpace(res.Stdout)
}

func (e *env) actor(id string) api.Actor {
	e.t.Helper()
	a, err := e.svc.Actor(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func code(err error) string { return errdefs.Code(err) }

// flipAByte changes one bit of the byte in the middle of file.
func flipAByte(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLifecycleKeepsTheCounter(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	first := e.counter("a1", "incr")
	ctx := context.Background()
	a, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"})
	if err != nil || a.State != api.Paused || a.Snapshot == nil || a.Snapshot.Kind != api.KindPause || a.Snapshot.Stored != "" {
		t.Fatalf("pause: %+v %v", a, err)
	}
	if _, ok := e.rt.Sandbox(a.Sandbox); ok {
		t.Fatal("the paused actor's sandbox is still there")
	}
	if _, err := e.svc.Resume(ctx, api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	// Suspend of a running actor: committed, stored, sandbox gone.
	a, err = e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
	if err != nil || a.State != api.Suspended || a.Snapshot.Stored == "" || a.Snapshot.Kind != api.KindCommit || a.Reason != "" {
		t.Fatalf("suspend: %+v %v", a, err)
	}
	// Resume from the store alone.
	if err := os.RemoveAll(a.Snapshot.Dir); err != nil {
		t.Fatal(err)
	}
	if a, err := e.svc.Resume(ctx, api.OpRequest{ID: "a1"}); err != nil || a.State != api.Running {
		t.Fatalf("resume from the store: %+v %v", a, err)
	}
	inst, value, _ := strings.Cut(first, " ")
	if got := e.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("after pause, resume, suspend and a pull, counter %q (was %s %s)", got, inst, value)
	}
	// The pulled copy is recorded as here.
	if s, _ := e.svc.Snapshot(ctx, a.Snapshot.ID); s.Dir == "" {
		t.Fatalf("the pulled snapshot is not recorded on this node: %+v", s)
	}
	d, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"})
	if err != nil || !d.Deleted || len(d.KeptSnapshots) != 1 {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := e.svc.Actor(ctx, "a1"); code(err) != "not_found" {
		t.Fatalf("the deleted actor: %v", err)
	}
}

// TestPausedSnapshotIsStoredAsCommit: suspending a paused actor stores its
// snapshot, which is then recorded as a commit.
func TestPausedSnapshotIsStoredAsCommit(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	if _, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	a, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
	if err != nil || a.State != api.Suspended || a.Snapshot.Kind != api.KindCommit || a.Snapshot.Stored == "" {
		t.Fatalf("suspend of a paused actor: %+v %v", a, err)
	}
}

// TestRequestIDBeforeState: a retried request answers as the first did,
// even after the actor moved on, and two copies sent at once run once.
func TestRequestIDBeforeState(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	if _, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	req := api.OpRequest{ID: "a1", RequestID: "r1"}
	if _, err := e.svc.Resume(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The actor is RUNNING now; the same resume again is its first result.
	if a, err := e.svc.Resume(ctx, req); err != nil || a.State != api.Running {
		t.Fatalf("the retried resume after it succeeded: %+v %v", a, err)
	}
	// Two copies of one suspend at once: both answer SUSPENDED, one ran.
	release := make(chan struct{})
	e.rt.Hook = func(ctx context.Context, method, _ string) error {
		if method == "Checkpoint" {
			<-release
		}
		return nil
	}
	var wg sync.WaitGroup
	results := make([]api.Actor, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { results[i], errs[i] = e.svc.Suspend(ctx, api.OpRequest{ID: "a1", RequestID: "r2"}) })
	}
	waitForStep(t, e, "a1", "checkpoint")
	close(release)
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil || results[i].State != api.Suspended {
			t.Fatalf("copy %d of the suspend: %+v %v", i, results[i], errs[i])
		}
	}
	if n := e.rt.Calls["Checkpoint"]; n != 2 {
		t.Fatalf("%d checkpoints for a pause and one suspend sent twice", n)
	}
	// A failed operation's retry fails alike, with its category.
	e.rt.Hook = runtimetest.Fail("Restore")
	_, first := e.svc.Resume(ctx, api.OpRequest{ID: "a1", RequestID: "r3"})
	e.rt.Hook = nil
	_, again := e.svc.Resume(ctx, api.OpRequest{ID: "a1", RequestID: "r3"})
	if first == nil || again == nil || code(again) != code(first) || !strings.Contains(again.Error(), "injected failure") {
		t.Fatalf("a failed request and its retry: %v / %v", first, again)
	}
	if a := e.actor("a1"); a.State != api.Suspended {
		t.Fatalf("after the failed resume: %+v", a)
	}
}

// waitForStep waits until the journal shows the actor's operation at step.
func waitForStep(t *testing.T, e *env, id, step string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if a := e.actor(id); a.Operation != nil && a.Operation.Step == step {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("actor %s never reached step %s", id, step)
}

// TestBusyNamesTheOperation: a second operation while one runs is aborted,
// naming the operation and its step; so is an exec.
func TestBusyNamesTheOperation(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	release := make(chan struct{})
	e.rt.Hook = func(ctx context.Context, method, _ string) error {
		if method == "Checkpoint" {
			<-release
		}
		return nil
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
		done <- err
	}()
	waitForStep(t, e, "a1", "checkpoint")
	for name, op := range map[string]func() error{
		"suspend": func() error { _, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"}); return err },
		"delete":  func() error { _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); return err },
		"exec": func() error {
			_, err := e.svc.Exec(ctx, api.ExecRequest{ID: "a1", Args: []string{"true"}})
			return err
		},
	} {
		err := op()
		if code(err) != "aborted" || !strings.Contains(err.Error(), "busy with suspend") || !strings.Contains(err.Error(), "step checkpoint") {
			t.Errorf("%s while a suspend runs: %v", name, err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestDeadlineRollsBack: a runtime call that hangs is cut short at the
// kind's deadline; the suspend fails with deadline_exceeded, rolled back,
// and the actor runs on with its counter.
func TestDeadlineRollsBack(t *testing.T) {
	e := newEnv(t, func(c *service.Config) { c.Deadlines = map[string]time.Duration{"suspend": 300 * time.Millisecond} })
	e.template("t", nil)
	e.run("a1")
	before := e.counter("a1", "incr")
	e.rt.Hook = func(ctx context.Context, method, _ string) error {
		if method == "Checkpoint" {
			return runtimetest.Block(ctx)
		}
		return nil
	}
	start := time.Now()
	a, err := e.svc.Suspend(context.Background(), api.OpRequest{ID: "a1"})
	if code(err) != "deadline_exceeded" || !strings.Contains(err.Error(), "deadline of 300ms at step checkpoint") || !strings.Contains(err.Error(), "--deadline suspend=") {
		t.Fatalf("the hung suspend: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the deadline took %s to act", took)
	}
	if a.State != api.Running || a.Operation != nil || !strings.Contains(a.Reason, "keeps running") {
		t.Fatalf("after the deadline: %+v", a)
	}
	e.rt.Hook = nil
	if got := e.counter("a1", "get"); got != before {
		t.Fatalf("counter %q after the rollback, was %q", got, before)
	}
	// The next suspend, under the default deadline (300 ms is too short for a
	// push on a loaded machine), works: nothing of the rolled-back one is left.
	e.cfg.Deadlines = nil
	e.restart()
	if _, err := e.svc.Suspend(context.Background(), api.OpRequest{ID: "a1"}); err != nil {
		t.Fatalf("the next suspend: %v", err)
	}
	if _, err := service.ParseDeadlines([]string{"warp=1s"}); code(err) != "invalid_argument" {
		t.Fatalf("an unknown kind's deadline: %v", err)
	}
}

// TestCorruptLocalSnapshotNeverRuns: a flipped byte in a paused actor's
// image is found while it restores; the resume fails as corrupt, the new
// sandbox is gone, the actor stays PAUSED.
func TestCorruptLocalSnapshotNeverRuns(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	a, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	flipAByte(t, filepath.Join(a.Snapshot.Dir, "image", "pages.img"))
	a, err = e.svc.Resume(ctx, api.OpRequest{ID: "a1"})
	if code(err) != "data_loss" || !strings.Contains(err.Error(), "pages.img") || !strings.Contains(err.Error(), "do not match their SHA-256") {
		t.Fatalf("resume of a corrupt snapshot: %v", err)
	}
	if a.State != api.Paused || !strings.Contains(a.Reason, "intact") {
		t.Fatalf("after the refused resume: %+v", a)
	}
	if _, ok := e.rt.Sandbox(api.SandboxID("a1")); ok {
		t.Fatal("the sandbox restored from a corrupt snapshot is still there")
	}
}

// TestDamagedCopyOfAStoredSnapshotIsFetchedAgain: a local copy of a stored
// snapshot is a cache (a pull does not wait for its bytes to reach the
// disk): when a byte of it is wrong, the resume that finds it fetches the
// stored snapshot instead, and the actor resumes with its state.
func TestDamagedCopyOfAStoredSnapshotIsFetchedAgain(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	inst, _, _ := strings.Cut(e.counter("a1", "incr"), " ")
	ctx := context.Background()
	a, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
	if err != nil || a.Snapshot == nil || a.Snapshot.Stored == "" || a.Snapshot.Dir == "" {
		t.Fatalf("suspend: %+v %v", a, err)
	}
	flipAByte(t, filepath.Join(a.Snapshot.Dir, "image", "pages.img"))
	if a, err := e.svc.Resume(ctx, api.OpRequest{ID: "a1"}); err != nil || a.State != api.Running {
		t.Fatalf("resume with a damaged local copy of a stored snapshot: %+v %v", a, err)
	}
	if got := e.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the resume from the store", got)
	}
	ev, err := e.svc.Events(ctx, api.EventsRequest{ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	var saidIt, pulled bool
	for _, x := range ev.Events {
		saidIt = saidIt || strings.Contains(x.Message, "cannot be used") && strings.Contains(x.Message, "fetching the stored one")
		pulled = pulled || x.Step == "pull" && x.Error == ""
	}
	if !saidIt || !pulled {
		t.Fatalf("the history does not say the local copy was set aside and the stored one fetched: %+v", ev.Events)
	}
}

// TestDamagedManifestSaysWhy: a local manifest that names a path outside
// its folder is refused as corrupt with that cause, not as internal.
func TestDamagedManifestSaysWhy(t *testing.T) {
	e := newEnv(t, func(c *service.Config) { c.Repo = nil })
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	a, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(a.Snapshot.Dir, "manifest.json")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte(strings.Replace(string(data), `"path": "image/`, `"path": "../`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = e.svc.Resume(ctx, api.OpRequest{ID: "a1"})
	if code(err) != "data_loss" || !strings.Contains(err.Error(), "escapes the snapshot folder") {
		t.Fatalf("resume with a damaged manifest: %v", err)
	}
}

// TestExecOfMissingCommandAndWrongState: categories, not internal.
func TestExecCategories(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	if res, err := e.svc.Exec(ctx, api.ExecRequest{ID: "a1", Args: []string{"/nope"}}); err != nil || res.ExitCode != 127 {
		t.Fatalf("a missing command: %+v %v", res, err)
	}
	if _, err := e.svc.Exec(ctx, api.ExecRequest{ID: "a1"}); code(err) != "invalid_argument" {
		t.Fatalf("no command: %v", err)
	}
	if _, err := e.svc.Exec(ctx, api.ExecRequest{ID: "zz", Args: []string{"true"}}); code(err) != "not_found" {
		t.Fatalf("unknown actor: %v", err)
	}
	if _, err := e.svc.Pause(ctx, api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Exec(ctx, api.ExecRequest{ID: "a1", Args: []string{"true"}}); code(err) != "failed_precondition" {
		t.Fatalf("exec in a paused actor: %v", err)
	}
}

// TestFailuresLeaveStableStates: a failing step of each operation leaves
// the actor where the state machine says.
func TestFailuresLeaveStableStates(t *testing.T) {
	cases := []struct {
		method  string
		op      string
		want    api.State
		setup   func(*env)
		reason  string
		errCode string
	}{
		{"Create", "run", api.Crashed, nil, "did not start", "internal"},
		{"Checkpoint", "pause", api.Running, func(e *env) { e.run("a1") }, "keeps running", "internal"},
		{"Checkpoint", "suspend", api.Running, func(e *env) { e.run("a1") }, "keeps running", "internal"},
		{"Restore", "resume", api.Paused, func(e *env) { e.run("a1"); must(e.svc.Pause(context.Background(), api.OpRequest{ID: "a1"})) }, "intact", "internal"},
		{"Delete", "delete", api.Crashed, func(e *env) { e.run("a1") }, "run it again", "internal"},
	}
	for _, c := range cases {
		t.Run(c.op+"_"+c.method, func(t *testing.T) {
			e := newEnv(t, nil)
			e.template("t", nil)
			if c.setup != nil {
				c.setup(e)
			}
			e.rt.Hook = runtimetest.Fail(c.method)
			ctx := context.Background()
			var err error
			switch c.op {
			case "run":
				_, err = e.svc.Run(ctx, api.RunRequest{Template: "t", ID: "a1"})
			case "pause":
				_, err = e.svc.Pause(ctx, api.OpRequest{ID: "a1"})
			case "suspend":
				_, err = e.svc.Suspend(ctx, api.OpRequest{ID: "a1"})
			case "resume":
				_, err = e.svc.Resume(ctx, api.OpRequest{ID: "a1"})
			case "delete":
				_, err = e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"})
			}
			if !errors.Is(err, runtimetest.ErrInjected) || code(err) != c.errCode {
				t.Fatalf("%s with %s failing: %v", c.op, c.method, err)
			}
			a := e.actor("a1")
			if a.State != c.want || a.Operation != nil || !strings.Contains(a.Reason, c.reason) {
				t.Fatalf("after the failed %s: %+v", c.op, a)
			}
			e.rt.Hook = nil
			if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); err != nil {
				t.Fatalf("delete after the failure: %v", err)
			}
		})
	}
}

func must[T any](_ T, err error) {
	if err != nil {
		panic(err)
	}
}

// TestDeleteIsRetriable: a delete's retry with the same request id answers
// as the first did, although the actor is gone.
func TestDeleteIsRetriable(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	req := api.DeleteRequest{ID: "a1", RequestID: "d1"}
	if _, err := e.svc.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if d, err := e.svc.Delete(ctx, req); err != nil || !d.Deleted {
		t.Fatalf("the retried delete: %+v %v", d, err)
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); code(err) != "not_found" {
		t.Fatalf("a new delete of a deleted actor: %v", err)
	}
}

func TestTemplateRemoval(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("a1")
	ctx := context.Background()
	tpl, err := e.svc.Warm(ctx, api.WarmRequest{Template: "t"})
	if err != nil || tpl.Golden == "" {
		t.Fatalf("warm: %+v %v", tpl, err)
	}
	golden, err := e.svc.Snapshot(ctx, tpl.Golden)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteTemplate(ctx, "t"); code(err) != "failed_precondition" || !strings.Contains(err.Error(), "a1") {
		t.Fatalf("removing a template an actor uses: %v", err)
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteTemplate(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(golden.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the golden snapshot's folder is left: %v", err)
	}
	if _, err := e.svc.Snapshot(ctx, tpl.Golden); code(err) != "not_found" {
		t.Fatalf("the golden snapshot's record is left: %v", err)
	}
	if err := e.svc.DeleteTemplate(ctx, "t"); code(err) != "not_found" {
		t.Fatalf("removing it again: %v", err)
	}
}

// TestGoldenStartsActors: actors of a warmed template continue the warmed
// process.
func TestGoldenStartsActors(t *testing.T) {
	e := newEnv(t, nil)
	e.template("t", nil)
	ctx := context.Background()
	if _, err := e.svc.Warm(ctx, api.WarmRequest{Template: "t"}); err != nil {
		t.Fatal(err)
	}
	a := e.run("b1")
	b := e.run("b2")
	if !strings.Contains(a.Reason, "golden") || !strings.Contains(b.Reason, "golden") {
		t.Fatalf("not started from the golden snapshot: %q / %q", a.Reason, b.Reason)
	}
	ia, _, _ := strings.Cut(e.counter("b1", "get"), " ")
	ib, _, _ := strings.Cut(e.counter("b2", "get"), " ")
	if ia != ib {
		t.Fatalf("two actors of the golden snapshot run different processes: %s %s", ia, ib)
	}
}

// TestHostPolicy: templates that would hand a sandbox more of the host
// than allowed are refused with permission_denied, naming the path and
// the flag that allows it; nothing is recorded.
func TestHostPolicy(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	outside := t.TempDir()
	link := filepath.Join(e.host, "link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		tpl  api.Template
		want string
	}{
		"rootfs /":            {api.Template{Rootfs: "/", Args: []string{"/bin/cat", "/etc/shadow"}}, "--allow-host-root"},
		"rootfs outside":      {api.Template{Rootfs: outside, Args: []string{"/x"}}, "--host-path"},
		"bundle outside":      {api.Template{Bundle: outside}, "--host-path"},
		"read-write bind":     {api.Template{Bundle: e.bundle(bindOf(e.host, "rw"))}, ":rw"},
		"bind outside":        {api.Template{Bundle: e.bundle(bindOf(outside, "ro"))}, "--host-path"},
		"bind through a link": {api.Template{Bundle: e.bundle(bindOf(link, "ro"))}, "(/etc, symlinks resolved)"},
		"bind of /":           {api.Template{Bundle: e.bundle(bindOf("/", "ro"))}, "host's root"},
		"the data folder":     {api.Template{Bundle: e.bundle(bindOf(e.cfg.DataDir, "ro"))}, "data folder"},
		"hooks": {api.Template{Bundle: e.bundle(func(s *specs.Spec) {
			//lint:ignore SA1019 the deprecated hook still runs, so it is the one a hostile bundle would use
			s.Hooks = &specs.Hooks{Prestart: []specs.Hook{{Path: "/bin/sh"}}}
		})}, "OCI hooks"},
		"devices": {api.Template{Bundle: e.bundle(func(s *specs.Spec) {
			s.Linux = &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/sda", Type: "b"}}}
		})}, "lists devices"},
	}
	for name, c := range cases {
		c.tpl.Name = "bad"
		_, err := e.svc.CreateTemplate(ctx, c.tpl)
		if code(err) != "permission_denied" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want permission_denied naming %q", name, err, c.want)
		}
	}
	if list, _ := e.svc.Templates(ctx); len(list) != 0 {
		t.Fatalf("refused templates were recorded: %+v", list)
	}
	// Read-only binds inside an allowed folder, and one marked rw, pass.
	if _, err := e.svc.CreateTemplate(ctx, api.Template{Name: "ok", Bundle: e.bundle(bindOf(e.host, "ro"))}); err != nil {
		t.Fatalf("a read-only bind of an allowed folder: %v", err)
	}
	rw := newEnv(t, func(c *service.Config) { c.HostPaths.Paths[0].ReadWrite = true })
	if _, err := rw.svc.CreateTemplate(ctx, api.Template{Name: "ok", Bundle: rw.bundle(bindOf(rw.host, "rw"))}); err != nil {
		t.Fatalf("a read-write bind of a folder allowed read-write: %v", err)
	}
	// A bundle changed after its template was made is checked again at run.
	bad := e.bundle(nil)
	if _, err := e.svc.CreateTemplate(ctx, api.Template{Name: "t", Bundle: bad}); err != nil {
		t.Fatal(err)
	}
	spec, _ := bundle.Load(bad)
	bindOf("/", "ro")(spec)
	if err := bundle.Save(bad, spec); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Run(ctx, api.RunRequest{Template: "t", ID: "a1"}); code(err) != "permission_denied" {
		t.Fatalf("run of a bundle changed to mount /: %v", err)
	}
}

func bindOf(src, mode string) func(*specs.Spec) {
	return func(s *specs.Spec) {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host", Source: src, Type: "bind", Options: []string{"rbind", mode}})
	}
}

// TestDataFolderIsPrivate: the folders that hold state are 0700 whatever
// they were made with.
func TestDataFolderIsPrivate(t *testing.T) {
	data := t.TempDir()
	if err := os.Chmod(data, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *service.Config) { c.DataDir = data })
	e.template("t", nil)
	e.run("a1")
	if _, err := e.svc.Pause(context.Background(), api.OpRequest{ID: "a1"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{data, filepath.Join(data, "actors"), filepath.Join(data, "snapshots")} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v", d, st.Mode(), err)
		}
	}
}

var _ runtime.Runtime = runtimetest.New()

// TestRunFromStored: an actor suspended to the store by one node starts on
// another node, which shares only the store, from that stored snapshot,
// its state kept; a stored snapshot that is not there leaves the new actor
// CRASHED (never cold-booted), and bad requests change nothing.
func TestRunFromStored(t *testing.T) {
	ctx := context.Background()
	a := newEnv(t, nil)
	a.template("t", nil)
	a.run("m1")
	a.counter("m1", "incr")
	a.counter("m1", "incr")
	suspended, err := a.svc.Suspend(ctx, api.OpRequest{ID: "m1"})
	if err != nil || suspended.Snapshot == nil || suspended.Snapshot.Stored == "" {
		t.Fatalf("suspend on node a: %+v %v", suspended, err)
	}
	stored := suspended.Snapshot.Stored

	b := newEnv(t, func(c *service.Config) { c.Repo = a.cfg.Repo })
	b.template("t", nil)
	for _, c := range []struct {
		req  api.RunRequest
		code string
	}{
		{api.RunRequest{Template: "t", ID: "x1", FromStored: stored, Cold: true}, "invalid_argument"},
		{api.RunRequest{Template: "t", ID: "x2", FromStored: "../escape"}, "invalid_argument"},
	} {
		if _, err := b.svc.Run(ctx, c.req); code(err) != c.code {
			t.Errorf("run %+v: %v, want %s", c.req, err, c.code)
		}
	}
	if list, _ := b.svc.Actors(ctx); len(list) != 0 {
		t.Fatalf("refused requests left actors: %+v", list)
	}
	moved, err := b.svc.Run(ctx, api.RunRequest{Template: "t", ID: "m1", FromStored: stored})
	if err != nil || moved.State != api.Running || !strings.Contains(moved.Reason, stored) || moved.Snapshot == nil || moved.Snapshot.Stored != stored {
		t.Fatalf("run from the stored snapshot on node b: %+v %v", moved, err)
	}
	if got := b.counter("m1", "get"); !strings.HasSuffix(got, " 2") {
		t.Fatalf("counter on node b after the move: %q, want 2", got)
	}
	// Suspended again on b, the actor's newer snapshot is stored under a
	// new name.
	again, err := b.svc.Suspend(ctx, api.OpRequest{ID: "m1"})
	if err != nil || again.Snapshot == nil || again.Snapshot.Stored == "" || again.Snapshot.Stored == stored {
		t.Fatalf("suspend on node b: %+v %v", again, err)
	}

	// An actor started from another's snapshot (or a golden one) does not
	// take it with it when it is purged.
	if _, err := b.svc.Run(ctx, api.RunRequest{Template: "t", ID: "m3", FromStored: stored}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Delete(ctx, api.DeleteRequest{ID: "m3", Purge: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cfg.Repo.Snapshot(ctx, stored); err != nil {
		t.Fatalf("purging m3 deleted m1's snapshot it started from: %v", err)
	}

	missing, err := b.svc.Run(ctx, api.RunRequest{Template: "t", ID: "m2", FromStored: "m2.snap-000000000000"})
	_, left := b.rt.Sandbox(api.SandboxID("m2"))
	if code(err) != "not_found" || missing.State != api.Crashed || left {
		t.Fatalf("run from a missing stored snapshot: %+v %v (sandbox left: %v)", missing, err, left)
	}
}

// TestPurgeDeletesOnlyWhatTheActorPushed: ids may hold dots, so one can
// begin another's stored names (d, d.x): purging d deletes the snapshots d
// pushed, never d.x's that d started from, nor d.x's own; purging d.x then
// deletes d.x's. Ownership is what the journal recorded at the push.
func TestPurgeDeletesOnlyWhatTheActorPushed(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, nil)
	e.template("t", nil)
	e.run("d.x")
	dx, err := e.svc.Suspend(ctx, api.OpRequest{ID: "d.x"})
	if err != nil || dx.Snapshot == nil || dx.Snapshot.Stored == "" {
		t.Fatalf("suspend d.x: %+v %v", dx, err)
	}
	if _, err := e.svc.Run(ctx, api.RunRequest{Template: "t", ID: "d", FromStored: dx.Snapshot.Stored}); err != nil {
		t.Fatal(err)
	}
	d, err := e.svc.Suspend(ctx, api.OpRequest{ID: "d"})
	if err != nil || d.Snapshot == nil || d.Snapshot.Stored == "" || d.Snapshot.Stored == dx.Snapshot.Stored {
		t.Fatalf("suspend d: %+v %v", d, err)
	}
	stored := func(name string) bool {
		_, err := e.cfg.Repo.Snapshot(ctx, name)
		return err == nil
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "d", Purge: true}); err != nil {
		t.Fatal(err)
	}
	if stored(d.Snapshot.Stored) || !stored(dx.Snapshot.Stored) {
		t.Fatalf("after rm --purge d: d's own %s stored %v (want gone), d.x's %s stored %v (want kept)",
			d.Snapshot.Stored, stored(d.Snapshot.Stored), dx.Snapshot.Stored, stored(dx.Snapshot.Stored))
	}
	gone, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "d.x", Purge: true})
	if err != nil || len(gone.KeptSnapshots) != 0 || stored(dx.Snapshot.Stored) {
		t.Fatalf("rm --purge d.x: %+v %v; its snapshot %s stored %v", gone, err, dx.Snapshot.Stored, stored(dx.Snapshot.Stored))
	}
}

// TestFullDiskStrandsNoActor: the journal's disk fills during a suspend
// (its reserve's room taken too, as a process that fills the disk takes
// it): the suspend fails and rolls back, its end cannot be recorded, yet
// the actor reads RUNNING, not SUSPENDING; a new request on it is refused
// as the disk being full, not as busy; once there is room, the end is
// written before the next request, which goes through.
func TestFullDiskStrandsNoActor(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	testdisk.Tmpfs(t, data, "16m")
	filler := filepath.Join(data, "filler")
	e := newEnv(t, func(c *service.Config) { c.DataDir, c.JournalReserve = data, -1 })
	e.template("t", nil)
	e.run("a1")
	e.rt.Hook = func(_ context.Context, method, _ string) error {
		if method == "Checkpoint" {
			testdisk.Fill(t, filler)
		}
		return nil
	}
	if _, err := e.svc.Suspend(ctx, api.OpRequest{ID: "a1"}); err == nil {
		t.Fatal("a suspend onto a full disk succeeded")
	}
	e.rt.Hook = nil
	a := e.actor("a1")
	if a.State != api.Running || a.Operation != nil || !strings.Contains(a.Reason, "not recorded in the journal yet") {
		t.Fatalf("after the suspend failed on a full disk: %+v; want RUNNING, no operation, the reason saying it is not recorded yet", a)
	}
	if rec, err := e.svc.Journal().Actor(ctx, "a1"); err != nil || rec.Running == nil {
		t.Fatalf("the journal recorded the end on a full disk: %+v %v (the test's premise)", rec, err)
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); code(err) != "resource_exhausted" || !strings.Contains(err.Error(), "not recorded yet") {
		t.Fatalf("rm on a full disk: %v; want resource_exhausted saying the end is not recorded yet", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if got := e.counter("a1", "get"); got == "" {
		t.Fatal("a1 does not count after the failed suspend")
	}
	if _, err := e.svc.Delete(ctx, api.DeleteRequest{ID: "a1"}); err != nil {
		t.Fatalf("rm once there is room: %v", err)
	}
}
