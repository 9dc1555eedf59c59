// Command counter is the test actor: a process whose only state is a number
// in its memory. "counter serve" holds the number and a random id chosen at
// start; "counter incr" and "counter get" ask the serving process over a
// unix socket and print "<id> <value>". "counter await incr|get" first waits,
// with inotify, for the socket to appear, for use right after a start. A
// restored process answers with the same id and the value it had when it was
// checkpointed; a cold boot answers with a new id and 0.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	socketDir  = "/tmp"
	socketName = "counter.sock"
	socket     = socketDir + "/" + socketName
)

func main() {
	args := os.Args[1:]
	var err error
	if len(args) == 2 && args[0] == "await" {
		err = awaitSocket()
		args = args[1:]
	}
	if err != nil || len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: counter serve|incr|get|await incr|await get", err)
		os.Exit(2)
	}
	switch args[0] {
	case "serve":
		err = serve()
	case "incr", "get":
		err = ask(args[0])
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "counter:", err)
		os.Exit(1)
	}
}

func serve() error {
	idBytes := make([]byte, 8)
	if _, err := rand.Read(idBytes); err != nil {
		return err
	}
	id := hex.EncodeToString(idBytes)
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
	fmt.Println("serving", id)
	value := 0
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if strings.TrimSpace(line) == "incr" {
			value++
		}
		fmt.Fprintf(conn, "%s %d\n", id, value)
		conn.Close()
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

func ask(cmd string) error {
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
	fmt.Print(reply)
	return nil
}
