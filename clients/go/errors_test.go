package sluice

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Every code has its own sentinel, named after it, and back.
func TestOneSentinelPerCode(t *testing.T) {
	seen := map[error]wire.Code{}
	for _, c := range wire.Codes {
		s := CodeError(c)
		if s == ErrUnknownCode {
			t.Fatalf("code %s has no sentinel", c)
		}
		if prev, dup := seen[s]; dup {
			t.Fatalf("codes %s and %s share a sentinel", prev, c)
		}
		seen[s] = c
		if !strings.HasSuffix(s.Error(), c.String()) {
			t.Fatalf("sentinel %q for %s", s, c)
		}
		err := error(&ServerError{Code: c, Message: "m"})
		if !errors.Is(err, s) || IsRetryable(err) != c.Retryable() {
			t.Fatalf("code %s", c)
		}
	}
	if CodeError(0) != ErrUnknownCode || CodeError(999) != ErrUnknownCode {
		t.Fatal("unknown codes")
	}
	// Client-side errors are not retryable, but a lost connection is.
	for _, e := range []error{ErrTimeout, ErrClosed, ErrTooManyOutstanding, ErrInvalidRequest, ErrMalformedAnswer} {
		if IsRetryable(e) {
			t.Fatalf("%v is retryable", e)
		}
	}
	if !IsRetryable(ErrConnectionLost) || !IsRetryable(ErrFraming) {
		t.Fatal("connection loss is retryable")
	}
}
