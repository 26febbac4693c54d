package jobmsg

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
	CodeGaveUp     = "gave_up"     // a retryable Failure on the consumer's last delivery (max_deliver)
	// CodeReplyToRefused: X-Reply-To names a subject the request's tenant
	// may not publish to (jobs.streams reply_prefixes; never $-subjects).
	CodeReplyToRefused = "reply_to_refused"
)

// Sentinels of the outcomes of one message. Test with errors.Is.
var (
	// ErrRetry: the message may succeed later; it is nak'ed with a delay.
	ErrRetry = errors.New("jobs: retryable")
	// ErrDeadLetter: retrying cannot help; the message is dead-lettered.
	ErrDeadLetter = errors.New("jobs: dead letter")
)

// Failure is why a message did not produce a result.
type Failure struct {
	Code  string // the dead letter's code: a wire name or one of Code* above
	Msg   string
	Retry bool // nak and try again; otherwise dead-letter
}

func (f *Failure) Error() string { return f.Code + ": " + f.Msg }

// Unwrap gives ErrRetry or ErrDeadLetter.
func (f *Failure) Unwrap() error {
	if f.Retry {
		return ErrRetry
	}
	return ErrDeadLetter
}

// DeadLetter is a failure retrying cannot fix.
func DeadLetter(code, format string, args ...any) *Failure {
	return &Failure{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Retryable is a failure that may pass on a later delivery.
func Retryable(code, format string, args ...any) *Failure {
	return &Failure{Code: code, Msg: fmt.Sprintf(format, args...), Retry: true}
}

// Classify turns what the data plane answered into a Failure. expired
// says whether the message's own deadline has passed by now.
func Classify(err error, expired bool) *Failure {
	var se *sluice.ServerError
	switch {
	case errors.As(err, &se):
		switch {
		case se.Code == wire.CodeDeadlineExceeded && expired:
			return DeadLetter(CodeExpired, "the engine found the deadline passed before the request ran: %s", se.Message)
		case se.Code == wire.CodeDeadlineExceeded:
			// The frame's deadline was the ingress's own request bound
			// (no X-AI-Timeout, or not passed yet): the job may run later.
			return Retryable("timeout", "the engine found jobs.request_timeout_ms passed before the request ran: %s", se.Message)
		case se.Code == wire.CodeUnauthenticated:
			// The ingress signs with the configured key; a refusal means
			// the key changed under it (a rotation in flight): retry.
			return Retryable(se.Code.String(), "the engine refused the tenant's key (changed?): %s", se.Message)
		case se.Code.Retryable():
			return Retryable(se.Code.String(), "%s", se.Message)
		}
		return DeadLetter(se.Code.String(), "%s", se.Message)
	case errors.Is(err, sluice.ErrInvalidRequest):
		var we wire.Error
		if errors.As(err, &we) {
			return DeadLetter(we.Code().String(), "%v", err)
		}
		return DeadLetter(CodeBadMessage, "%v", err)
	case errors.Is(err, sluice.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		if expired {
			return DeadLetter(CodeExpired, "no answer before the deadline (X-AI-Timeout)")
		}
		return Retryable("timeout", "no answer from the data plane within jobs.request_timeout_ms")
	}
	// Closed or lost client, too many outstanding, a cancelled context:
	// nothing says the request cannot succeed.
	return Retryable("internal", "%v", err)
}
