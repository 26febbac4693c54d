package jobs

import (
	"context"
	"errors"
	"fmt"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Codes of dead letters that are the ingress's own; the others are the
// wire's error names (docs/wire.md, "Error codes": unknown_model,
// schema_mismatch, bad_tensor, ...).
const (
	CodeBadMessage = "bad_message" // a header or the body cannot be read as a request
	CodeExpired    = "expired"     // past its X-AI-Timeout: not run
	CodeGaveUp     = "gave_up"     // a retryable failure on the consumer's last delivery (max_deliver)
)

// Sentinels of the outcomes of one message. Test with errors.Is.
var (
	// ErrRetry: the message may succeed later; it is nak'ed with a delay.
	ErrRetry = errors.New("jobs: retryable")
	// ErrDeadLetter: retrying cannot help; the message is dead-lettered.
	ErrDeadLetter = errors.New("jobs: dead letter")
)

// failure is why a message did not produce a result.
type failure struct {
	code  string // dead-letter code (wire name or Code* above)
	msg   string
	retry bool
}

func (f *failure) Error() string { return f.code + ": " + f.msg }

// Unwrap gives ErrRetry or ErrDeadLetter.
func (f *failure) Unwrap() error {
	if f.retry {
		return ErrRetry
	}
	return ErrDeadLetter
}

func deadLetter(code, format string, args ...any) *failure {
	return &failure{code: code, msg: fmt.Sprintf(format, args...)}
}

func retry(code, format string, args ...any) *failure {
	return &failure{code: code, msg: fmt.Sprintf(format, args...), retry: true}
}

// classify turns what the data plane answered into a failure. expired
// says whether the message's own deadline has passed by now.
func classify(err error, expired bool) *failure {
	var se *sluice.ServerError
	switch {
	case errors.As(err, &se):
		switch {
		case se.Code == wire.CodeDeadlineExceeded && expired:
			return deadLetter(CodeExpired, "the engine found the deadline passed before the request ran: %s", se.Message)
		case se.Code == wire.CodeDeadlineExceeded:
			// The frame's deadline was the ingress's own request bound
			// (no X-AI-Timeout, or not passed yet): the job may run later.
			return retry("timeout", "the engine found jobs.request_timeout_ms passed before the request ran: %s", se.Message)
		case se.Code == wire.CodeUnauthenticated:
			// The ingress signs with the configured key; a refusal means
			// the key changed under it (a rotation in flight): retry.
			return retry(se.Code.String(), "the engine refused the tenant's key (changed?): %s", se.Message)
		case se.Code.Retryable():
			return retry(se.Code.String(), "%s", se.Message)
		}
		return deadLetter(se.Code.String(), "%s", se.Message)
	case errors.Is(err, sluice.ErrInvalidRequest):
		var we wire.Error
		if errors.As(err, &we) {
			return deadLetter(we.Code().String(), "%v", err)
		}
		return deadLetter(CodeBadMessage, "%v", err)
	case errors.Is(err, sluice.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		if expired {
			return deadLetter(CodeExpired, "no answer before the deadline (X-AI-Timeout)")
		}
		return retry("timeout", "no answer from the data plane within jobs.request_timeout_ms")
	}
	// Closed or lost client, too many outstanding, a cancelled context:
	// nothing says the request cannot succeed.
	return retry("internal", "%v", err)
}
