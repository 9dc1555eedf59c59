package fleet

import (
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Failpoint stops this process (SIGSTOP), as a hung one, the first time it
// reaches Point: the tests hang the agent or the controller at a named
// point of a release or a rebind (STASIS_KUBE_FAILPOINT) and let it go on
// with SIGCONT. The zero Failpoint, or a nil one, never stops.
type Failpoint struct {
	Point string
	Log   *slog.Logger
	once  sync.Once
}

// Reach stops the process if at is the Failpoint's point, the first time.
func (f *Failpoint) Reach(at string) {
	if f == nil || f.Point == "" || f.Point != at {
		return
	}
	f.once.Do(func() {
		if f.Log != nil {
			f.Log.Warn("failpoint reached: stopping (SIGSTOP)", "failpoint", at)
		}
		// A signal is delivered when the kernel gets to it: this goroutine
		// waits for the SIGCONT that ends the stop, so that it never goes
		// on before the process stopped.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
	})
}
