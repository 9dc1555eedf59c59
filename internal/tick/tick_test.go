package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestEveryStopWaitsForTheLastCall: stop returns only once the call in
// flight has ended, and fn is never called after that; a cancelled
// context ends the loop as stop does.
func TestEveryStopWaitsForTheLastCall(t *testing.T) {
	var stopped, late atomic.Bool
	inside, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	stop := Every(context.Background(), 1, func() {
		if stopped.Load() {
			late.Store(true)
		}
		if calls.Add(1) == 1 {
			close(inside)
			<-release
		}
	})
	<-inside
	returned := make(chan struct{})
	go func() { stop(); stopped.Store(true); close(returned) }()
	select {
	case <-returned:
		t.Fatal("stop returned while fn was still running")
	default:
	}
	close(release)
	<-returned
	if late.Load() {
		t.Fatal("fn ran after stop returned")
	}

	ctx, cancel := context.WithCancel(context.Background())
	stop = Every(ctx, 1, func() {})
	cancel()
	stop() // returns: the loop ended with the context
}

// TestEveryOrWakes: a wake calls fn at once, long before the interval.
func TestEveryOrWakes(t *testing.T) {
	wake := make(chan struct{})
	called := make(chan struct{}, 1)
	stop := EveryOr(context.Background(), time.Hour, wake, func() { called <- struct{}{} })
	defer stop()
	for range 3 {
		wake <- struct{}{}
		<-called
	}
}
