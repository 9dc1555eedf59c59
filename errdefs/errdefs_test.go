package errdefs

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestCategoryTravelsThroughWrapping(t *testing.T) {
	errGone := New(ErrNotFound, "container not found")
	wrapped := fmt.Errorf("reconcile a1: runsc state: %w", errGone)
	if !errors.Is(wrapped, errGone) || !errors.Is(wrapped, ErrNotFound) {
		t.Fatalf("the sentinel or its category is lost: %v", wrapped)
	}
	if got := Of(wrapped); got.Code != "not_found" || got.Exit != 3 {
		t.Fatalf("category %+v", got)
	}
	if wrapped.Error() != "reconcile a1: runsc state: container not found" {
		t.Fatalf("text %q", wrapped)
	}
}

func TestMarkWinsOverTheCategoryInside(t *testing.T) {
	inner := fmt.Errorf("load: %w", New(ErrNotFound, "manifest.json missing"))
	marked := fmt.Errorf("snapshot s1: %w", Mark(inner, ErrCorrupt))
	if Code(marked) != "data_loss" {
		t.Fatalf("code %q, want data_loss", Code(marked))
	}
	if !errors.Is(marked, ErrNotFound) || marked.Error() != "snapshot s1: load: manifest.json missing" {
		t.Fatalf("the marked error's own chain or text changed: %v", marked)
	}
	if Mark(nil, ErrCorrupt) != nil {
		t.Fatal("Mark(nil) is not nil")
	}
}

func TestContextErrorsAndUnknown(t *testing.T) {
	if Code(fmt.Errorf("runsc checkpoint: %w", context.DeadlineExceeded)) != "deadline_exceeded" {
		t.Error("deadline")
	}
	if Code(context.Canceled) != "canceled" {
		t.Error("canceled")
	}
	if c := Of(errors.New("boom")); c != Internal {
		t.Errorf("an error without a category: %+v", c)
	}
	if Of(nil).Code != "" {
		t.Error("nil has a category")
	}
	joined := errors.Join(errors.New("first"), New(ErrBusy, "second"))
	if Code(joined) != "aborted" {
		t.Errorf("joined: %q", Code(joined))
	}
}

func TestFromCodeRoundTrip(t *testing.T) {
	for _, c := range Categories {
		err := FromCode(c.Code, "said by stasisd")
		if !errors.Is(err, c.Err) || err.Error() != "said by stasisd" || Of(err).Exit != c.Exit {
			t.Errorf("%s: %v", c.Code, err)
		}
	}
	if err := FromCode("no_such_code", "x"); Of(err) != Internal {
		t.Errorf("an unknown code: %+v", Of(err))
	}
	seen := map[int]bool{}
	for _, c := range Categories {
		if seen[c.Exit] || c.Exit < 2 {
			t.Errorf("exit code %d of %s is taken or reserved", c.Exit, c.Code)
		}
		seen[c.Exit] = true
	}
}
