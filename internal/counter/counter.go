// Package counter is the demo and test actor: a process whose only state is a
// number in its memory. "counter serve" holds the number and a random id chosen at
// start; "counter incr" and "counter get" ask the serving process over a
// unix socket and print "<id> <value>". "counter await incr|get" first waits,
// with inotify, for the socket to appear, for use right after a start. A
// restored process answers with the same id and the value it had when it was
// checkpointed; a cold boot answers with a new id and 0. "counter serve ADDR"
// also answers over TCP at ADDR (such as :8000), the same way: a line
// "incr" or "get", the answer "<id> <value>". "counter say TEXT" has the
// serving process print TEXT on its standard output; "counter waitfile
// PATH" prints a line, waits for PATH to exist and prints another.
package counter

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	socketDir  = "/tmp"
	socketName = "counter.sock"
	socket     = socketDir + "/" + socketName
)

// Run does what args ask: serve, incr, get, or await followed by incr or
// get. It writes answers to stdout.
func Run(args []string, stdout io.Writer) error {
	if len(args) == 2 && args[0] == "await" {
		if err := awaitSocket(); err != nil {
			return err
		}
		args = args[1:]
	}
	if len(args) == 2 && args[0] == "serve" {
		return serve(stdout, args[1])
	}
	if len(args) == 2 && args[0] == "waitfile" {
		// Says it waits, then waits for the file and says it is there: an
		// exec whose output comes in two parts, apart in time.
		fmt.Fprintln(stdout, "waiting for", args[1])
		for {
			if _, err := os.Stat(args[1]); err == nil {
				fmt.Fprintln(stdout, "found", args[1])
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(args) == 2 && args[0] == "read" {
		// Reads a file whole and says how many bytes it holds: a read by
		// the sandbox of one of its files.
		data, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, len(data))
		return nil
	}
	if len(args) == 2 && args[0] == "say" {
		// The serving process writes the text on its standard output (the
		// actor's console), a line of its own.
		return ask("say "+args[1], stdout)
	}
	if len(args) == 2 && args[0] == "exit" {
		// The serving process exits with that code once it answered.
		return ask("exit "+args[1], stdout)
	}
	if len(args) != 1 {
		return fmt.Errorf("usage: serve [ADDR]|incr|get|cat|tty|size|read PATH|say TEXT|waitfile PATH|exit CODE|await incr|await get")
	}
	switch args[0] {
	case "serve":
		return serve(stdout, "")
	case "cat":
		// Standard input to standard output: an exec's stdin, seen.
		_, err := io.Copy(stdout, os.Stdin)
		return err
	case "tty":
		return talk(stdout)
	case "size":
		// Whether its standard output is a terminal, and its size.
		fmt.Fprintln(stdout, terminalSize())
		return nil
	case "incr", "get":
		return ask(args[0], stdout)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func serve(stdout io.Writer, tcp string) error {
	idBytes := make([]byte, 8)
	if _, err := rand.Read(idBytes); err != nil {
		return err
	}
	id := hex.EncodeToString(idBytes)
	var mu sync.Mutex
	value := 0
	answer := func(conn net.Conn) {
		defer conn.Close()
		r := bufio.NewReader(conn)
		line, _ := r.ReadString('\n')
		if strings.TrimSpace(line) == "wait" {
			// A connection that stays open: answered at once, then read
			// until the client ends it.
			fmt.Fprintf(conn, "%s waiting\n", id)
			_, _ = io.Copy(io.Discard, r)
			return
		}
		if code, ok := strings.CutPrefix(strings.TrimSpace(line), "exit "); ok {
			n, err := strconv.Atoi(code)
			if err != nil {
				fmt.Fprintf(conn, "%s bad exit code %q\n", id, code)
				return
			}
			fmt.Fprintf(conn, "%s exiting %d\n", id, n)
			conn.Close()
			os.Exit(n)
		}
		if text, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "say "); ok {
			mu.Lock()
			fmt.Fprintln(stdout, text)
			mu.Unlock()
			fmt.Fprintf(conn, "%s said\n", id)
			return
		}
		mu.Lock()
		if strings.TrimSpace(line) == "incr" {
			value++
		}
		v := value
		mu.Unlock()
		fmt.Fprintf(conn, "%s %d\n", id, v)
	}
	if tcp != "" {
		l, err := net.Listen("tcp", tcp)
		if err != nil {
			return err
		}
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				go answer(conn)
			}
		}()
	}
	// Listen under a temporary name and rename, so that the socket appears
	// only once it accepts connections.
	tmp := socket + ".new"
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, socket); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "serving", id)
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		answer(conn)
	}
}

// awaitSocket returns once the serving process's socket exists. The watch is
// set before looking, so a socket created in between is not missed.
func awaitSocket() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, socketDir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		if _, err := os.Stat(socket); err == nil {
			return nil
		}
		if _, err := unix.Read(fd, buf); err != nil {
			return err
		}
	}
}

func ask(cmd string, stdout io.Writer) error {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	fmt.Fprintln(conn, cmd)
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, reply)
	return err
}

// talk says whether its standard output is a terminal and its size, then
// answers each line of its standard input ("got LINE"; "size": the size
// again; "quit": ends) and says each resize as it hears of it (SIGWINCH):
// an exec's input, terminal and resizes, seen as they come.
func talk(stdout io.Writer) error {
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stdout, format+"\n", args...)
	}
	size := terminalSize
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	go func() {
		for range winch {
			say("resized: %s", size())
		}
	}()
	say("%s", size())
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		switch line := strings.TrimSpace(lines.Text()); line {
		case "quit":
			say("bye")
			return nil
		case "size":
			say("%s", size())
		default:
			say("got %s", line)
		}
	}
	say("end of input")
	return lines.Err()
}

// terminalSize says whether standard output is a terminal, and its size.
func terminalSize() string {
	ws, err := unix.IoctlGetWinsize(1, unix.TIOCGWINSZ)
	if err != nil {
		return "not a terminal"
	}
	return fmt.Sprintf("terminal %dx%d", ws.Row, ws.Col)
}
