// Package change carries one admin API call's change through the layers
// that write it: the change id the client gave (Idempotency-Key) or one
// made up, and where the store put it. The id is kept with every message
// the change writes (Nats-Msg-Id), so a repeat of the call with the same
// id is not applied twice and the change can be found in the store.
package change

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nuid"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// IDLenMax bounds a client's change id (the store appends a write number).
const IDLenMax = 48

// Record is one call's change.
type Record struct {
	ID string

	mu        sync.Mutex
	writes    int
	Bucket    string
	Revision  uint64
	Duplicate bool
	Written   bool
	notServed bool
}

// NotServedHere records that the change was stored but this appliance's
// engine did not serve it within the wait.
func (r *Record) NotServedHere() {
	r.mu.Lock()
	r.notServed = true
	r.mu.Unlock()
}

// ServedHere reports whether the engine served the change before the answer.
func (r *Record) ServedHere() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.notServed
}

type ctxKey struct{}

// With returns ctx carrying rec.
func With(ctx context.Context, rec *Record) context.Context {
	return context.WithValue(ctx, ctxKey{}, rec)
}

// From returns the record ctx carries, or nil.
func From(ctx context.Context) *Record {
	rec, _ := ctx.Value(ctxKey{}).(*Record)
	return rec
}

// NewID returns a fresh change id.
func NewID() string { return "sl-" + nuid.Next() }

// Check reports whether id is usable as a client's change id.
func Check(id string) error {
	if id == "" || len(id) > IDLenMax {
		return fmt.Errorf("%w: Idempotency-Key must be 1..=%d bytes", errs.ErrInvalidArgument, IDLenMax)
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: Idempotency-Key %q has %q (allowed: A-Z a-z 0-9 _ . -)", errs.ErrInvalidArgument, id, c)
		}
	}
	return nil
}

// WriteID returns the id of the next store write of ctx's change: the
// change id for the first, id:N for the N-th (a call that writes several
// times, such as deleting a subject's versions, needs one id per write).
// Without a record, a fresh id.
func WriteID(ctx context.Context) string {
	rec := From(ctx)
	if rec == nil {
		return NewID()
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.writes++
	if rec.writes == 1 {
		return rec.ID
	}
	return rec.ID + ":" + strconv.Itoa(rec.writes)
}

// Note records where a write of ctx's change landed.
func Note(ctx context.Context, bucket string, revision uint64, duplicate bool) {
	rec := From(ctx)
	if rec == nil {
		return
	}
	rec.mu.Lock()
	rec.Bucket, rec.Revision, rec.Written = bucket, max(rec.Revision, revision), true
	rec.Duplicate = rec.Duplicate || duplicate
	rec.mu.Unlock()
}

// Snapshot returns the record's fields under its lock.
func (r *Record) Snapshot() (bucket string, revision uint64, duplicate, written bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Bucket, r.Revision, r.Duplicate, r.Written
}

// Of returns the change a store message id belongs to: the id without the
// write number (id:N) and the batch position (id/i).
func Of(msgID string) string {
	if i := strings.LastIndexByte(msgID, '/'); i > 0 && isNum(msgID[i+1:]) {
		msgID = msgID[:i]
	}
	if i := strings.LastIndexByte(msgID, ':'); i > 0 && isNum(msgID[i+1:]) {
		msgID = msgID[:i]
	}
	return msgID
}

func isNum(s string) bool {
	_, err := strconv.Atoi(s)
	return s != "" && err == nil
}
