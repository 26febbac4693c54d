// Package errs holds the sentinel errors shared by the engine, the daemon and
// the admin API. Each engine status code of the C ABI maps one-to-one to a
// sentinel here, so the cgo wrapper converts with FromStatus and nothing else.
package errs

import (
	"errors"
	"fmt"
)

// Status is the numeric status returned across the C ABI. 0 is success.
type Status int32

// Status codes, stable: the Rust side uses the same numbers.
const (
	StatusOK              Status = 0
	StatusInvalidArgument Status = 1  // a call argument is malformed (empty name, bad JSON)
	StatusInvalidConfig   Status = 2  // a config set was refused whole; the message says why
	StatusNotFound        Status = 3  // model, version, alias, peer or shard unknown
	StatusAlreadyExists   Status = 4  // model version or peer already present
	StatusBusy            Status = 5  // a conflicting operation is in progress; retry
	StatusShuttingDown    Status = 6  // the engine is draining and accepts nothing new
	StatusNotRunning      Status = 7  // Start was not called, or Stop already finished
	StatusUnsupported     Status = 8  // feature not built in (dpdk, rdma) or not implemented
	StatusIO              Status = 9  // an OS call failed (bind, mmap, hugepages, model file)
	StatusTimeout         Status = 10 // a deadline passed (graceful drain)
	StatusInternal        Status = 11 // a bug or broken invariant
	StatusPanic           Status = 12 // a Rust panic was caught at the boundary
)

// Sentinels. Test with errors.Is; messages from the engine wrap them.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrInvalidConfig   = errors.New("invalid config")
	ErrNotFound        = errors.New("not found")
	ErrAlreadyExists   = errors.New("already exists")
	ErrBusy            = errors.New("busy")
	ErrShuttingDown    = errors.New("shutting down")
	ErrNotRunning      = errors.New("not running")
	ErrUnsupported     = errors.New("unsupported")
	ErrIO              = errors.New("i/o error")
	ErrTimeout         = errors.New("timeout")
	ErrInternal        = errors.New("internal error")
	ErrPanic           = errors.New("engine panic")
)

// Control-plane sentinels: outcomes of a write to a replicated store (fleet
// mode). They have no engine status code; StatusOf reports them as
// internal, so the admin API tests for them with errors.Is first.
var (
	// ErrConflict: the store refused a compare-and-set because another
	// writer changed the key first. Nothing was written; retrying once this
	// appliance has caught up can succeed.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the store could not take the write (no connection,
	// no stream leader, quorum not ready) and nothing was written.
	ErrUnavailable = errors.New("unavailable")
	// ErrOutcomeUnknown: the write was sent but no answer came in time; it
	// may still be applied (everywhere) or never (anywhere).
	ErrOutcomeUnknown = errors.New("outcome unknown")
)

var controlOnly = []struct {
	err  error
	name string
}{
	{ErrConflict, "conflict"},
	{ErrUnavailable, "unavailable"},
	{ErrOutcomeUnknown, "outcome_unknown"},
}

type entry struct {
	status Status
	err    error
	name   string // snake_case, used as the "code" of API errors
}

var table = []entry{
	{StatusInvalidArgument, ErrInvalidArgument, "invalid_argument"},
	{StatusInvalidConfig, ErrInvalidConfig, "invalid_config"},
	{StatusNotFound, ErrNotFound, "not_found"},
	{StatusAlreadyExists, ErrAlreadyExists, "already_exists"},
	{StatusBusy, ErrBusy, "busy"},
	{StatusShuttingDown, ErrShuttingDown, "shutting_down"},
	{StatusNotRunning, ErrNotRunning, "not_running"},
	{StatusUnsupported, ErrUnsupported, "unsupported"},
	{StatusIO, ErrIO, "io"},
	{StatusTimeout, ErrTimeout, "timeout"},
	{StatusInternal, ErrInternal, "internal"},
	{StatusPanic, ErrPanic, "panic"},
}

// FromStatus turns an engine status and its message into an error wrapping
// the matching sentinel. StatusOK yields nil; an unknown status is internal.
func FromStatus(s Status, msg string) error {
	if s == StatusOK {
		return nil
	}
	for _, e := range table {
		if e.status == s {
			if msg == "" {
				return e.err
			}
			return fmt.Errorf("%w: %s", e.err, msg)
		}
	}
	return fmt.Errorf("%w: unknown engine status %d: %s", ErrInternal, s, msg)
}

// StatusOf returns the status of the outermost sentinel err wraps (an
// error may wrap several: "%w: %w"); errors that wrap none are internal.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	if s, ok := statusIn(err); ok {
		return s
	}
	return StatusInternal
}

// statusIn walks err's tree outermost first, left to right.
func statusIn(err error) (Status, bool) {
	for _, e := range table {
		if err == e.err {
			return e.status, true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			return statusIn(inner)
		}
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			if s, ok := statusIn(inner); ok {
				return s, true
			}
		}
	}
	return 0, false
}

// Name returns the snake_case code of err ("invalid_config", ...).
func Name(err error) string {
	if err == nil {
		return "ok"
	}
	for _, c := range controlOnly {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	s := StatusOf(err)
	for _, e := range table {
		if e.status == s {
			return e.name
		}
	}
	return "internal"
}

// Invalid wraps ErrInvalidConfig with a formatted reason.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}
