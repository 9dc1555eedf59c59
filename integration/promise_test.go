package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite"

	"github.com/stasis-run/stasis/api"
	"github.com/stasis-run/stasis/engine"
	"github.com/stasis-run/stasis/errdefs"
	"github.com/stasis-run/stasis/internal/halt"
	"github.com/stasis-run/stasis/service"
	"github.com/stasis-run/stasis/testkit/testdisk"
)

// These tests are the faults and attacks of "Keep the promise" (the fault
// matrix in docs/service.md), each against the real stasisd and runsc.

// TestSecondDaemonIsRefused: a second stasisd on the same data folder, or
// on the same runsc state folder, does not start, and the first one's
// suspend goes on untouched; the CLI's daemon-less suspend is refused on
// stasisd's runsc folder too.
func TestSecondDaemonIsRefused(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	for _, args := range [][]string{
		{"--data", d.data, "--socket", filepath.Join(t.TempDir(), "s")},
		{"--data", t.TempDir(), "--runsc-root", filepath.Join(d.data, "runsc"), "--socket", filepath.Join(t.TempDir(), "s")},
	} {
		out, err := exec.Command(stasisd.path(t), args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "stasisd (pid ") {
			t.Fatalf("a second stasisd %v: %v\n%s", args, err, out)
		}
	}
	cli := stasisCLI.path(t)
	out, err := exec.Command(cli, "suspend", "a1", "--bundle", filepath.Join(d.data, "actors", "a1", "bundle"), "--snapshot", filepath.Join(t.TempDir(), "s"),
		"--data", d.data).CombinedOutput()
	if code := exitCode(err); code != 6 || !strings.Contains(string(out), "belongs to stasisd (pid ") || !strings.Contains(string(out), "stasis actor") {
		t.Fatalf("a daemon-less suspend on stasisd's runsc folder: exit %d\n%s", code, out)
	}
	if a := d.op("Suspend", "a1"); a.State != api.Suspended {
		t.Fatalf("the first daemon's suspend: %+v", a)
	}
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestHalfDeletedSandboxAtStart reproduces the start that failed after a
// kill -9 during a suspend's delete step: the orphaned runsc delete holds
// the container's lock while the new stasisd asks runsc for its state, and
// removes the state file before letting go, so that runsc answers "no such
// file or directory". The daemon must start and finish the suspend.
func TestHalfDeletedSandboxAtStart(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	d.stop()
	d.start(service.Failpoint(service.KindSuspend, engine.StepDelete, false))
	if _, err := d.api.Suspend(context.Background(), api.OpRequest{ID: "a1"}); err == nil {
		t.Fatal("the suspend answered although stasisd should have died before its delete step")
	}
	d.crashed()
	root, id := filepath.Join(d.data, "runsc"), api.SandboxID("a1")
	lock, err := os.OpenFile(filepath.Join(root, id+"_sandbox:"+id+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		defer close(started)
		d.start("")
	}()
	// Wait for the new stasisd's runsc state to wait on the lock (past
	// finding the state file), then do what the orphaned delete did:
	// remove the state file, unlock.
	var st unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "runsc state of a1 waiting on the container's lock", func() bool { return lockWaiter(st.Ino) })
	// runsc's delete removes the sandbox's control socket as it stops it,
	// then the state file.
	if err := os.Remove(filepath.Join(root, "runsc-"+id+".sock")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, id+"_sandbox:"+id+".state")); err != nil {
		t.Fatal(err)
	}
	_ = unix.Flock(int(lock.Fd()), unix.LOCK_UN)
	<-started
	a := d.inspect("a1")
	if a.State != api.Suspended || a.Operation != nil {
		t.Fatalf("after the start: %+v", a)
	}
	d.op("Resume", "a1")
	if got := d.counter("a1", "get"); !strings.HasSuffix(got, " 0") {
		t.Fatalf("the resumed counter says %q", got)
	}
}

// lockWaiter tells whether a process waits for a lock on inode ino:
// /proc/locks lists waiters with "->".
func lockWaiter(ino uint64) bool {
	data, _ := os.ReadFile("/proc/locks")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "->") && strings.Contains(line, fmt.Sprintf(":%d ", ino)) {
			return true
		}
	}
	return false
}

func processMatching(match func(string) bool) bool { return pidMatching(match) > 0 }

// pidMatching is the pid of a process whose command line (arguments
// joined by spaces) match accepts; 0 where none does.
func pidMatching(match func(string) bool) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !match(strings.ReplaceAll(string(data), "\x00", " ")) {
			continue
		}
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			return pid
		}
	}
	return 0
}

// waitFor polls cond, which observes what another process does, for up to
// a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestFullDiskDoesNotStrandTheActor: with the data folder's disk full to
// the last block (and the journal's write-ahead log emptied, so that the
// next write needs new blocks), a pause is refused and its end recorded:
// the actor runs on, RUNNING, and rm is not answered busy.
func TestFullDiskDoesNotStrandTheActor(t *testing.T) {
	d := newDaemon(t)
	testdisk.Tmpfs(t, d.data, "96m")
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.data, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	testdisk.Fill(t, filepath.Join(d.data, "filler"))
	_, err = d.api.Pause(context.Background(), api.OpRequest{ID: "a1"})
	if err == nil || !strings.Contains(err.Error(), "disk") {
		t.Fatalf("pause onto a full disk: %v", err)
	}
	a := d.inspect("a1")
	if a.State != api.Running || a.Operation != nil {
		t.Fatalf("after the refused pause on a full disk: %+v", a)
	}
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q", got)
	}
	if err := os.Remove(filepath.Join(d.data, "filler")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.api.Delete(context.Background(), api.DeleteRequest{ID: "a1"}); err != nil {
		t.Fatalf("rm after the disk was full: %v", err)
	}
}

// TestCorruptLocalSnapshotNeverRuns: a flipped byte in a paused actor's
// pages.img (its sandbox not kept) is found while it restores: the resume fails as corrupt
// (data_loss), no sandbox is left, the actor stays PAUSED; with the byte
// put back it resumes.
func TestCorruptLocalSnapshotNeverRuns(t *testing.T) {
	d := newDaemon(t, "--keep-paused", "never")
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	a := d.op("Pause", "a1")
	pages := filepath.Join(a.Snapshot.Dir, "image", "pages.img")
	f, err := os.OpenFile(pages, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	at := st.Size() / 2
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	flip := func() {
		b[0] ^= 0x20
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
	}
	flip()
	_, err = d.api.Resume(context.Background(), api.OpRequest{ID: "a1"})
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != "data_loss" || !strings.Contains(err.Error(), "pages.img") {
		t.Fatalf("resume of a corrupt snapshot: %v", err)
	}
	if a := d.inspect("a1"); a.State != api.Paused || !strings.Contains(a.Reason, "intact") {
		t.Fatalf("after the refused resume: %+v", a)
	}
	d.requireNoSandbox("a1")
	flip()
	f.Close()
	d.op("Resume", "a1")
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the resume of the mended snapshot", got)
	}
}

// TestRequestLimits: a 100 MB body and a small gzip body inflating to 1 GiB
// are refused with resource_exhausted and the daemon's memory stays small;
// a misspelt field is refused, not ignored.
func TestRequestLimits(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	raw := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.socket)
	}}}
	send := func(procedure string, body io.Reader, gzipped bool) string {
		req, _ := http.NewRequest(http.MethodPost, "http://stasisd"+api.Procedure(procedure), body)
		req.Header.Set("Content-Type", "application/json")
		if gzipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		res, err := raw.Do(req)
		if err != nil {
			return err.Error()
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return string(out)
	}
	if out := send("CreateTemplate", strings.NewReader(`{"name":"`+strings.Repeat("x", 100<<20)+`"}`), false); !strings.Contains(out, "resource_exhausted") {
		t.Fatalf("a 100 MB body: %.300s", out)
	}
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	_, _ = zw.Write([]byte(`{"name":"`))
	zeros := make([]byte, 1<<20)
	for range 1024 {
		_, _ = zw.Write(zeros)
	}
	zw.Close()
	if out := send("CreateTemplate", &bomb, true); !strings.Contains(out, "resource_exhausted") {
		t.Fatalf("a gzip bomb: %.300s", out)
	}
	if rss := residentBytes(t, d.cmd.Process.Pid); rss > 200<<20 {
		t.Fatalf("stasisd holds %d MiB after the refused requests", rss>>20)
	}
	if out := send("Delete", strings.NewReader(`{"id":"a1","purg":true}`), false); !strings.Contains(out, "invalid_argument") || !strings.Contains(out, "purg") {
		t.Fatalf("a misspelt field: %s", out)
	}
}

func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestHostPathsAreGuarded: a template with the host's / as its rootfs, or
// a bundle with a read-write bind mount of a host folder, is refused with
// permission_denied; the same with --allow-host-root / --host-path DIR:rw
// is taken, and the host-root actor boots, pauses and resumes.
func TestHostPathsAreGuarded(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	ctx := context.Background()
	_, err := d.api.CreateTemplate(ctx, api.Template{Name: "root", Rootfs: "/", Args: []string{"/bin/cat", "/etc/shadow"}})
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "--allow-host-root") {
		t.Fatalf("a template on the host's root: %v", err)
	}
	host := t.TempDir()
	bind := d.bundleWith(t, host, "rw")
	if _, err := d.api.CreateTemplate(ctx, api.Template{Name: "rw", Bundle: bind}); !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), ":rw") {
		t.Fatalf("a read-write bind of a host folder: %v", err)
	}
	d.stop()
	d.extra = []string{"--allow-host-root", "--host-path", host + ":rw"}
	d.start("")
	if _, err := d.api.CreateTemplate(ctx, api.Template{Name: "rw", Bundle: bind}); err != nil {
		t.Fatalf("the read-write bind, allowed: %v", err)
	}
	if _, err := d.api.CreateTemplate(ctx, api.Template{Name: "root", Rootfs: "/", Args: []string{"/bin/sleep", "infinity"}}); err != nil {
		t.Fatalf("the host's root, allowed: %v", err)
	}
	// It boots (its overlay in the sandbox's memory), runs the host's
	// programs, and pauses and resumes.
	d.run("root", "r1")
	res, err := d.api.Exec(ctx, api.ExecRequest{ID: "r1", Args: []string{"/bin/echo", "from the host's root"}})
	if err != nil || res.Stdout != "from the host's root\n" {
		t.Fatalf("exec on the host's root: %+v %v", res, err)
	}
	d.op("Pause", "r1")
	if a := d.op("Resume", "r1"); a.State != api.Running {
		t.Fatalf("resume of the host-root actor: %+v", a)
	}
}

// bundleWith is the counter's bundle with a bind mount of host at /host.
func (d *daemon) bundleWith(t *testing.T, host, mode string) string {
	dir := d.template("scratch-"+mode, nil).Bundle
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), `"mounts": [`, `"mounts": [{"destination": "/host", "type": "bind", "source": "`+host+`", "options": ["rbind", "`+mode+`"]},`, 1)
	if out == string(data) {
		t.Fatal("no mounts in the test bundle")
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEverythingIsPrivate: with a umask of 022 and a data folder made 0755,
// nothing stasisd or runsc wrote there (journal, images, logs, state) is
// readable by other users.
func TestEverythingIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	d := newDaemon(t)
	if err := os.Chmod(d.data, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(d.data, "stasisd.log")
	d.extra = []string{"--log-file", log}
	d.startQuiet()
	d.template("counter", func(tpl *api.Template) { tpl.Env = []string{"API_TOKEN=secret"} })
	d.run("counter", "a1")
	d.op("Pause", "a1")
	d.op("Resume", "a1")
	d.op("Suspend", "a1")
	var open []string
	err := filepath.WalkDir(d.data, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		// runsc's pin of an empty network namespace holds nothing.
		if e.Name() == "null-netns" {
			return nil
		}
		if info.Mode().Perm()&0o077 != 0 && info.Mode().Type()&fs.ModeSymlink == 0 {
			open = append(open, fmt.Sprintf("%s %v", p, info.Mode()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(open) > 0 {
		t.Fatalf("readable by others:\n%s", strings.Join(open, "\n"))
	}
	if data, _ := os.ReadFile(log); !strings.Contains(string(data), "operation ended") {
		t.Fatalf("the log file has no operation in it:\n%s", data)
	}
}

// TestSocketPathIsNeverAFile: --socket naming a regular file is refused and
// the file is left as it was.
func TestSocketPathIsNeverAFile(t *testing.T) {
	precious := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(precious, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(stasisd.path(t), "--data", t.TempDir(), "--socket", precious).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is not a socket") {
		t.Fatalf("stasisd on a regular file's path: %v\n%s", err, out)
	}
	if data, err := os.ReadFile(precious); err != nil || string(data) != "keep me" {
		t.Fatalf("the file is %q %v", data, err)
	}
}

// TestRetriesAndRacesKeepTheContract: a retried resume after it succeeded
// answers with its result; the same request sent twice at once answers
// twice with one result; a second suspend while one runs is aborted,
// naming the operation and step.
func TestRetriesAndRacesKeepTheContract(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	ctx := context.Background()
	d.op("Pause", "a1")
	req := api.OpRequest{ID: "a1", RequestID: "resume-1"}
	if _, err := d.api.Resume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if a, err := d.api.Resume(ctx, req); err != nil || a.State != api.Running {
		t.Fatalf("the retried resume: %+v %v", a, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 2 {
		wg.Go(func() { _, errs[i] = d.api.Suspend(ctx, api.OpRequest{ID: "a1", RequestID: "suspend-1"}) })
	}
	waitFor(t, "the suspend in flight", func() bool { return d.inspect("a1").Operation != nil || d.inspect("a1").State == api.Suspended })
	_, errs[2] = d.api.Suspend(ctx, api.OpRequest{ID: "a1"})
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the same suspend sent twice: %v / %v", errs[0], errs[1])
	}
	// The third came while the first ran (busy) or after it (a suspend of
	// a suspended actor that is stored already: done).
	if errs[2] != nil && (!errors.Is(errs[2], errdefs.ErrBusy) || !strings.Contains(errs[2].Error(), "busy with suspend (operation op-")) {
		t.Fatalf("a second suspend while one runs: %v", errs[2])
	}
	events, err := d.api.Events(ctx, "a1", 0)
	if err != nil {
		t.Fatal(err)
	}
	checkpoints := 0
	for _, e := range events.Events {
		if e.Step == "checkpoint" {
			checkpoints++
		}
	}
	if checkpoints != 2 {
		t.Fatalf("%d checkpoints for a pause and one suspend sent twice", checkpoints)
	}
}

// TestDeadlineRollsBackAHungRunsc: a runsc whose checkpoint hangs is cut
// short at the suspend's deadline; the suspend fails with
// deadline_exceeded and rolls back, and the actor counts on.
func TestDeadlineRollsBackAHungRunsc(t *testing.T) {
	real, err := exec.LookPath("runsc")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "runsc")
	// Only the checkpoint itself hangs (runsc help checkpoint, run when
	// stasisd starts, does not).
	script := "#!/bin/sh\ncase \" $* \" in *\" checkpoint \"*\" --leave-running \"*) exec sleep 3600;; esac\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, "--runsc", wrapper, "--deadline", "suspend=3s")
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	inst, _, _ := strings.Cut(d.counter("a1", "incr"), " ")
	start := time.Now()
	_, err = d.api.Suspend(context.Background(), api.OpRequest{ID: "a1"})
	if !errors.Is(err, errdefs.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "at step checkpoint") {
		t.Fatalf("a suspend whose checkpoint hangs: %v", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the hung suspend took %s", took)
	}
	if a := d.inspect("a1"); a.State != api.Running || a.Operation != nil {
		t.Fatalf("after the deadline: %+v", a)
	}
	if got := d.counter("a1", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the rollback", got)
	}
	if processMatching(func(c string) bool { return strings.Contains(c, "sleep 3600") }) {
		t.Fatal("the hung checkpoint is still running")
	}
}

// TestStoppedSandboxIsRefused: runsc cannot reach a sandbox whose process
// is stopped (SIGSTOP, as a user or a debugger leaves it; a frozen cgroup
// is the same to runsc) and would wait for as long as it stays stopped,
// the actor held in SUSPENDING. Suspend, pause and exec each fail within
// seconds, saying so and how to let it run; the actor stays RUNNING with
// no operation under way, and once it runs again it suspends and resumes
// with its memory. A stopped actor is deleted as any other.
func TestStoppedSandboxIsRefused(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1.b")
	d.run("counter", "a1.b.c")
	inst, _, _ := strings.Cut(d.counter("a1.b", "incr"), " ")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := d.rt.State(ctx, api.SandboxID("a1.b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = syscall.Kill(st.PID, syscall.SIGCONT)
		}
	})
	mend := fmt.Sprintf("kill -CONT %d", st.PID)
	for name, call := range map[string]func() error{
		"suspend": func() error { _, err := d.api.Suspend(ctx, api.OpRequest{ID: "a1.b"}); return err },
		"pause":   func() error { _, err := d.api.Pause(ctx, api.OpRequest{ID: "a1.b"}); return err },
		"exec": func() error {
			_, err := d.api.Exec(ctx, api.ExecRequest{ID: "a1.b", Args: []string{"/counter", "get"}})
			return err
		},
	} {
		start := time.Now()
		err := call()
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), mend) {
			t.Fatalf("%s of an actor whose sandbox is stopped: %v; want a failed precondition that says %q", name, err, mend)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("the refused %s took %s", name, took)
		}
		if a := d.inspect("a1.b"); a.State != api.Running || a.Operation != nil {
			t.Fatalf("after the refused %s: %+v", name, a)
		}
	}
	other, err := d.rt.State(ctx, api.SandboxID("a1.b.c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(other.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := d.api.Delete(ctx, api.DeleteRequest{ID: "a1.b.c"}); err != nil {
		t.Fatalf("delete of an actor whose sandbox is stopped: %v", err)
	}
	if _, err := d.api.InspectActor(ctx, "a1.b.c"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("inspect after the delete: %v", err)
	}
	// Gone, or dead and waiting for its parent (runsc create's, long
	// gone) to be reaped.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", other.PID)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Fatalf("the deleted actor's sandbox process still runs: %s", stat)
	}
	stopped = false
	if err := syscall.Kill(st.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d.op("Suspend", "a1.b")
	d.op("Resume", "a1.b")
	if got := d.counter("a1.b", "incr"); got != inst+" 2" {
		t.Fatalf("counter %q after the suspend and resume", got)
	}
}

// TestStoppedDaemonIsNamed: a stasisd stopped (SIGSTOP, a debugger) still
// has its socket accept connections, and a client would wait for as long
// as the stop lasts. The API's client and the CLI fail at once, unavailable,
// naming the process and how to let it run; once it runs they work.
func TestStoppedDaemonIsNamed(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	pid := d.cmd.Process.Pid
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// The stop takes hold a moment after the signal.
	waitFor(t, "stasisd stopped", func() bool { return halt.ProcState(pid) == 'T' })
	mend := fmt.Sprintf("kill -CONT %d", pid)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := d.api.ListActors(ctx); !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), mend) || ctx.Err() != nil {
		t.Fatalf("a call to a stopped stasisd: %v; want unavailable, saying %q", err, mend)
	}
	cmd := exec.CommandContext(ctx, stasisCLI.path(t), "--socket", d.socket, "actor", "ps")
	out, err := cmd.CombinedOutput()
	if code := exitCode(err); code != 8 || !strings.Contains(string(out), mend) {
		t.Fatalf("stasis actor ps against a stopped stasisd: exit %d\n%s", code, out)
	}
	stopped = false
	if err := d.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := d.api.ListActors(ctx); err != nil {
		t.Fatalf("once stasisd runs again: %v", err)
	}
}

// TestCategoriesReachTheCLI: a damaged local manifest is data_loss with
// its cause (the pause stops its sandbox, so that the resume reads the
// snapshot), a missing command exits 127, an unknown actor exits 3, and
// --json prints errors as JSON.
func TestCategoriesReachTheCLI(t *testing.T) {
	d := newDaemon(t, "--keep-paused", "never")
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	cli := stasisCLI.path(t)
	stasis := func(args ...string) (string, int) {
		out, err := exec.Command(cli, append([]string{"--socket", d.socket, "--data", d.data}, args...)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := stasis("actor", "exec", "a1", "--", "/no/such/program"); code == 0 || code == 1 {
		t.Fatalf("exec of a missing command: exit %d\n%s", code, out)
	}
	if out, code := stasis("actor", "inspect", "nobody"); code != 3 || !strings.Contains(out, "not found") {
		t.Fatalf("inspect of nobody: exit %d\n%s", code, out)
	}
	if out, code := stasis("actor", "inspect", "nobody", "--json"); code != 3 || !strings.Contains(out, `"code": "not_found"`) || !strings.Contains(out, `"exit": 3`) {
		t.Fatalf("inspect --json of nobody: exit %d\n%s", code, out)
	}
	if out, code := stasis("actor", "bogus"); code != 2 || !strings.Contains(out, "unknown command") {
		t.Fatalf("an unknown subcommand: exit %d\n%s", code, out)
	}
	a := d.op("Pause", "a1")
	manifest := filepath.Join(a.Snapshot.Dir, "manifest.json")
	data, _ := os.ReadFile(manifest)
	if err := os.WriteFile(manifest, []byte(strings.Replace(string(data), `"path": "image/`, `"path": "../`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := stasis("actor", "resume", "a1"); code != 7 || !strings.Contains(out, "escapes the snapshot folder") {
		t.Fatalf("resume with a damaged manifest: exit %d\n%s", code, out)
	}
	// The same damaged snapshot, resumed without the daemon: data_loss too.
	root := t.TempDir()
	if out, code := stasis("resume", "x1", "--bundle", t.TempDir(), "--snapshot", a.Snapshot.Dir, "--runsc-root", root); code != 7 || !strings.Contains(out, "escapes the snapshot folder") {
		t.Fatalf("daemon-less resume with a damaged manifest: exit %d\n%s", code, out)
	}
	if out, code := stasis("resume", "x1", "--bundle", t.TempDir(), "--snapshot", a.Snapshot.Dir, "--runsc-root", root, "--gpu-path", "bogus"); code != 2 || !strings.Contains(out, "want exec or runtime") {
		t.Fatalf("a bad --gpu-path: exit %d\n%s", code, out)
	}
	// A bundle that is not there, in a folder templates may use: not found,
	// not forbidden.
	missing := filepath.Join(t.TempDir(), "no-bundle")
	if out, code := stasis("template", "create", "nobundle", "--bundle", missing); code != 3 || !strings.Contains(out, "does not exist") {
		t.Fatalf("a template whose bundle is missing: exit %d\n%s", code, out)
	}
}
