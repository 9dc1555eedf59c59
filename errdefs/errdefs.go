// Package errdefs is the set of error categories that travel from the
// package that knows what went wrong to the API's error codes and the CLI's
// exit codes, in the manner of containerd's errdefs. Every sentinel error of
// Stasis wraps one category (New), and an error from elsewhere is given one
// where its meaning becomes known (Mark), so that a caller several layers
// up, or on the other side of the API, can act on the category without
// parsing the message.
package errdefs

import (
	"context"
	"errors"
)

// The categories. Their names are the API's error codes (Connect's code
// names), which is how they cross the wire.
var (
	// ErrInvalidArgument: the request is malformed; sending it again will
	// not help.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotFound: what the request names does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: what the request would create exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrFailedPrecondition: the request is valid but cannot be done in
	// the present state (an actor in the wrong state, a preflight or a
	// compatibility check refused); nothing was touched.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrBusy: another operation holds the resource; retry when it ends.
	ErrBusy = errors.New("busy")
	// ErrCorrupt: stored data does not match its checksum or its format;
	// it was refused, not used.
	ErrCorrupt = errors.New("corrupt")
	// ErrUnavailable: a service needed is not reachable; retrying later
	// may work.
	ErrUnavailable = errors.New("unavailable")
	// ErrDeadlineExceeded: the operation ran past its deadline and was
	// rolled back.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrResourceExhausted: a limit was reached (a request too large, a
	// disk full).
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrCanceled: the caller gave up.
	ErrCanceled = errors.New("canceled")
	// ErrPermissionDenied: a policy forbids the request (a template that
	// reaches host paths it may not).
	ErrPermissionDenied = errors.New("permission denied")
)

// Category is one of the categories above, with the names it has at the
// edges.
type Category struct {
	Err error
	// Code is the API's error code.
	Code string
	// Exit is the CLI's exit code.
	Exit int
}

// Internal is the category of an error that has none: a bug or an
// unexpected failure.
var Internal = Category{Code: "internal", Exit: 1}

// Categories lists every category. Exit codes 2 and up
// are the CLI's documented ones (docs/cli.md); 1 is Internal.
var Categories = []Category{
	{ErrInvalidArgument, "invalid_argument", 2},
	{ErrNotFound, "not_found", 3},
	{ErrAlreadyExists, "already_exists", 4},
	{ErrFailedPrecondition, "failed_precondition", 5},
	{ErrBusy, "aborted", 6},
	{ErrCorrupt, "data_loss", 7},
	{ErrUnavailable, "unavailable", 8},
	{ErrDeadlineExceeded, "deadline_exceeded", 9},
	{ErrResourceExhausted, "resource_exhausted", 10},
	{ErrCanceled, "canceled", 11},
	{ErrPermissionDenied, "permission_denied", 12},
}

// Of is err's category: the outermost one in its chain (so a Mark wins
// over a category the marked error already had), with the context
// package's errors read as ErrDeadlineExceeded and ErrCanceled; Internal
// when it has none.
func Of(err error) Category {
	if err == nil {
		return Category{}
	}
	if c, ok := find(err); ok {
		return c
	}
	return Internal
}

// find walks err's chain depth first, a mark's category before what it
// marks.
func find(err error) (Category, bool) {
	for _, c := range Categories {
		if err == c.Err {
			return c, true
		}
	}
	switch err {
	case context.DeadlineExceeded:
		return byErr(ErrDeadlineExceeded), true
	case context.Canceled:
		return byErr(ErrCanceled), true
	}
	switch e := err.(type) {
	case *marked:
		return find(e.category)
	case *sentinel:
		return find(e.category)
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return find(inner)
		}
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if c, ok := find(inner); ok {
				return c, true
			}
		}
	}
	return Category{}, false
}

func byErr(err error) Category {
	for _, c := range Categories {
		if c.Err == err {
			return c
		}
	}
	return Internal
}

// Code is err's API error code ("" for nil).
func Code(err error) string { return Of(err).Code }

// ByCode is the category with an API error code; Internal for an unknown
// one.
func ByCode(code string) Category {
	for _, c := range Categories {
		if c.Code == code {
			return c
		}
	}
	return Internal
}

// New makes a sentinel error: its text is msg, and errors.Is finds both
// the sentinel and its category.
func New(category error, msg string) error { return &sentinel{msg: msg, category: category} }

type sentinel struct {
	msg      string
	category error
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Unwrap() error { return e.category }

// Mark gives err a category without changing its text: errors.Is finds
// both err's own chain and the category. Mark(nil, …) is nil.
func Mark(err, category error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, category: category}
}

type marked struct {
	err, category error
}

func (e *marked) Error() string   { return e.err.Error() }
func (e *marked) Unwrap() []error { return []error{e.err, e.category} }

// FromCode rebuilds an error that crossed the API: its text is msg and its
// category the one code names, so that errors.Is works on the client side
// as it did on the server's.
func FromCode(code, msg string) error {
	c := ByCode(code)
	if c.Err == nil {
		return errors.New(msg)
	}
	return New(c.Err, msg)
}
