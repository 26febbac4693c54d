package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestStatusRoundTrip(t *testing.T) {
	seen := map[Status]bool{}
	for _, e := range table {
		if seen[e.status] {
			t.Fatalf("status %d listed twice", e.status)
		}
		seen[e.status] = true
		err := FromStatus(e.status, "because")
		if !errors.Is(err, e.err) {
			t.Fatalf("FromStatus(%d) = %v, does not wrap %v", e.status, err, e.err)
		}
		if got := StatusOf(fmt.Errorf("ctx: %w", err)); got != e.status {
			t.Fatalf("StatusOf(wrapped %v) = %d, want %d", e.err, got, e.status)
		}
		if err.Error() != e.err.Error()+": because" {
			t.Fatalf("message %q", err.Error())
		}
	}
	// Codes are dense from 1 so the C side can use a plain enum.
	for s := Status(1); s <= StatusPanic; s++ {
		if !seen[s] {
			t.Fatalf("status %d has no sentinel", s)
		}
	}
}

func TestUnknownAndNil(t *testing.T) {
	if FromStatus(StatusOK, "x") != nil {
		t.Fatal("OK must be nil")
	}
	err := FromStatus(99, "odd")
	if !errors.Is(err, ErrInternal) || StatusOf(err) != StatusInternal {
		t.Fatalf("unknown status gave %v", err)
	}
	if StatusOf(errors.New("plain")) != StatusInternal || Name(errors.New("plain")) != "internal" {
		t.Fatal("plain errors are internal")
	}
	if Name(Invalid("x %d", 1)) != "invalid_config" {
		t.Fatal("Invalid must be invalid_config")
	}
}

func TestOutermostSentinelWins(t *testing.T) {
	inner := fmt.Errorf("%w: model file", ErrNotFound)
	err := fmt.Errorf("%w: store key k: %w", ErrIO, inner)
	if StatusOf(err) != StatusIO || !errors.Is(err, ErrNotFound) {
		t.Fatalf("StatusOf(%v) = %d, want io with the cause kept", err, StatusOf(err))
	}
	// ErrInvalidArgument comes first in the table but is the inner one.
	err = fmt.Errorf("%w: apply: %w", ErrTimeout, ErrInvalidArgument)
	if Name(err) != "timeout" {
		t.Fatalf("Name = %s, want timeout", Name(err))
	}
}
