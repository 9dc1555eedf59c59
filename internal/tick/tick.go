// Package tick runs a function on a ticker, for the loops of the daemons
// and the suspend's writeback.
package tick

import (
	"context"
	"time"
)

// Every calls fn every interval, in a goroutine of its own, until ctx ends
// or the returned stop is called; stop waits for the last call to end.
func Every(ctx context.Context, interval time.Duration, fn func()) (stop func()) {
	return EveryOr(ctx, interval, nil, fn)
}

// EveryOr is Every that also calls fn as soon as wake receives (a nil wake
// never does): fn's calls never overlap, and a wake during one is a call
// right after it.
func EveryOr(ctx context.Context, interval time.Duration, wake <-chan struct{}, fn func()) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			case <-wake:
				fn()
			}
		}
	}()
	return func() {
		cancel()
		<-finished
	}
}
