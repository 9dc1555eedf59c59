package integration

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stasis-run/stasis/internal/pty"
)

// lineReader sends each line r gives, without its line end, until r ends.
func lineReader(r io.Reader) <-chan string {
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				lines <- strings.TrimRight(line, "\r\n")
			}
			if err != nil {
				return
			}
		}
	}()
	return lines
}

// expectLine reads lines until one holds want; a line the command never
// prints fails the test after a bound far past any answer's.
func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	var seen []string
	bound := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("output ended before %q; it said %q", want, seen)
			}
			if strings.Contains(line, want) {
				return
			}
			seen = append(seen, line)
		case <-bound:
			t.Fatalf("no %q in 30 s; it said %q", want, seen)
		}
	}
}

// TestExecAttach: `stasis actor exec -i` gives the command its input as
// it comes (each answer read before the next line is written), its end the
// command's end of file; `-it` runs it on a terminal of the caller's
// size, with the container's environment, the caller's resizes passed on
// (SIGWINCH inside) and the caller's terminal raw meanwhile; -it from a
// pipe is refused.
func TestExecAttach(t *testing.T) {
	d := newDaemon(t)
	d.start("")
	d.template("counter", nil)
	d.run("counter", "a1")
	cli := stasisCLI.path(t)

	t.Run("interactive", func(t *testing.T) {
		cmd := exec.Command(cli, "--socket", d.socket, "actor", "exec", "-i", "a1", "/counter", "tty")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := lineReader(stdout)
		expectLine(t, lines, "not a terminal")
		for _, word := range []string{"ping", "pong"} {
			if _, err := io.WriteString(stdin, word+"\n"); err != nil {
				t.Fatal(err)
			}
			expectLine(t, lines, "got "+word)
		}
		stdin.Close()
		expectLine(t, lines, "end of input")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exec -i: %v", err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		master, replica, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer master.Close()
		if err := pty.SetSize(master, 30, 100); err != nil {
			t.Fatal(err)
		}
		// Named without its path: found on the container's PATH, which the
		// terminal's process has as any exec's.
		cmd := exec.Command(cli, "--socket", d.socket, "actor", "exec", "-it", "a1", "counter", "tty")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = replica, replica, replica
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replica.Close()
		lines := lineReader(master)
		expectLine(t, lines, "terminal 30x100")
		// The caller's terminal is raw: a carriage return goes through as
		// typed, and the actor's terminal makes it a line's end.
		if _, err := io.WriteString(master, "hello\r"); err != nil {
			t.Fatal(err)
		}
		expectLine(t, lines, "got hello")
		if err := pty.SetSize(master, 40, 120); err != nil {
			t.Fatal(err)
		}
		expectLine(t, lines, "resized: terminal 40x120")
		if _, err := io.WriteString(master, "quit\r"); err != nil {
			t.Fatal(err)
		}
		expectLine(t, lines, "bye")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("exec -it: %v", err)
		}
	})

	t.Run("terminal from a pipe", func(t *testing.T) {
		cmd := exec.Command(cli, "--socket", d.socket, "actor", "exec", "-it", "a1", "/counter", "tty")
		cmd.Stdin = strings.NewReader("hello\n")
		out, err := cmd.CombinedOutput()
		if exitCode(err) != 2 || !strings.Contains(string(out), "not a terminal") {
			t.Fatalf("exec -it from a pipe: exit %d\n%s", exitCode(err), out)
		}
	})

	t.Run("terminal without input", func(t *testing.T) {
		// No terminal here: the default size.
		out, err := exec.Command(cli, "--socket", d.socket, "actor", "exec", "-t", "a1", "/counter", "size").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "terminal 24x80") {
			t.Fatalf("exec -t: %v\n%q", err, out)
		}
	})

	// Last: stasisd stops while a user is in an interactive command. It
	// ends the command and stops, rather than wait for the user to leave;
	// the user is told why.
	t.Run("ended when stasisd stops", func(t *testing.T) {
		cmd := exec.Command(cli, "--socket", d.socket, "actor", "exec", "-i", "a1", "/counter", "tty")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		expectLine(t, lineReader(stdout), "not a terminal")
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
			d.cmd = nil
		case <-time.After(time.Minute):
			t.Fatalf("stasisd has not stopped a minute after SIGTERM while an interactive exec ran\n%s", d.logText())
		}
		err = cmd.Wait()
		if exitCode(err) == 0 || !strings.Contains(stderr.String(), "stasisd is stopping") {
			t.Fatalf("the exec when stasisd stopped: exit %d, said %q; want a failure that says stasisd is stopping", exitCode(err), stderr.String())
		}
	})
}
