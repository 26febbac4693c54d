package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Op is one key of a write: a value, or a delete marker.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
	// Expect is the key's revision the write is based on (0: never
	// written). The stream stores the write only if the key is still
	// there, so no write overwrites one its writer has not seen.
	Expect uint64
}

// Result is a stored write.
type Result struct {
	Revision  uint64 // stream sequence of the write's (last) message
	Duplicate bool   // an earlier attempt with the same change id had been stored
	Attempts  int
}

// UnknownError is a write that was sent and not answered in time: it may
// still be stored (then every appliance serves it) or never be.
type UnknownError struct {
	ChangeID string
	Bucket   string
	Keys     []string
	Base     []uint64 // each key's revision the write was based on
	Attempts int
	Cause    error
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("%v: change %s to %s %v was sent %d time(s) and not answered (%v); it may still be applied; "+
		"check whether the keys moved past revision %v with change id %s, or repeat it with the same change id "+
		"(within %v a duplicate is not applied twice)",
		errs.ErrOutcomeUnknown, e.ChangeID, e.Bucket, e.Keys, e.Attempts, e.Cause, e.Base, e.ChangeID, DuplicateWindow)
}

func (e *UnknownError) Unwrap() error { return errs.ErrOutcomeUnknown }

// Write stores ops, all or none, as one change tagged with changeID, and
// answers only what is known:
//
//   - nil: stored on a quorum (the stream acknowledged it).
//   - errs.ErrConflict: a key is not at its Expect revision; nothing stored.
//   - errs.ErrUnavailable: no attempt reached the stream (no connection,
//     no leader) before the op timeout; nothing stored.
//   - *UnknownError (errs.ErrOutcomeUnknown): an attempt was sent and
//     neither it nor its repeats got an answer that decides it.
//
// An unanswered attempt is repeated with the same message ids and the
// same expected revisions: the stream drops a repeat of a stored message
// (duplicate window) and refuses a repeat whose base moved, so repeats
// decide the outcome without ever applying the change twice.
func (b *Bucket) Write(ctx context.Context, changeID string, ops ...Op) (Result, error) {
	if err := b.checkOps(changeID, ops); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, b.o.OpTimeout)
	defer cancel()
	attemptTimeout := max(b.o.OpTimeout/4, 250*time.Millisecond)
	backoff := 25 * time.Millisecond
	var sent bool // some attempt may have reached the stream leader
	var cause error
	attempt := 0
	for {
		attempt++
		actx, acancel := context.WithTimeout(ctx, attemptTimeout)
		res, out, err := b.attempt(actx, changeID, ops)
		acancel()
		res.Attempts = attempt
		switch out {
		case outStored:
			return res, nil
		case outConflict:
			if rev, ferr := b.findChange(ctx, changeID, ops); ferr == nil {
				// Ours is the key's latest: stored by an earlier attempt or an
				// earlier call with this change id.
				return Result{Revision: rev, Duplicate: true, Attempts: attempt}, nil
			}
			if sent && b.o.Replicas == 1 {
				// A single-replica stream checks the base before the duplicate
				// window, so an earlier attempt may have been stored and then
				// overwritten: undecided.
				return Result{}, &UnknownError{ChangeID: changeID, Bucket: b.o.Bucket, Keys: keysOf(ops), Base: basesOf(ops),
					Attempts: attempt, Cause: err}
			}
			return res, fmt.Errorf("%w: %s in bucket %s changed since revision %v: not applied; retry once this appliance has caught up (%v)",
				errs.ErrConflict, keysOf(ops), b.o.Bucket, basesOf(ops), err)
		case outInvalid:
			return res, fmt.Errorf("%w: %s: not applied: %v", errs.ErrInvalidArgument, b.o.Bucket, err)
		case outPending, outUnknown:
			sent = true
		case outRefused:
			// Not stored; after an unanswered attempt it says nothing of that
			// attempt, so the outcome stays what it was.
		}
		cause = err
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
	if !sent {
		return Result{}, fmt.Errorf("%w: bucket %s did not take the change within %v: not applied (%v)",
			errs.ErrUnavailable, b.o.Bucket, b.o.OpTimeout, cause)
	}
	return Result{}, &UnknownError{ChangeID: changeID, Bucket: b.o.Bucket, Keys: keysOf(ops), Base: basesOf(ops),
		Attempts: attempt, Cause: cause}
}

type outcome int

const (
	outStored   outcome = iota
	outConflict         // a base revision moved: final
	outInvalid          // the stream will never take it: final
	outRefused          // not stored; may pass (no leader, not connected)
	outPending          // an earlier attempt of this change is in flight
	outUnknown          // sent, not answered
)

func (b *Bucket) checkOps(changeID string, ops []Op) error {
	if err := CheckChangeID(changeID); err != nil {
		return err
	}
	if len(ops) == 0 || len(ops) > BatchOpsMax {
		return fmt.Errorf("%w: a write takes 1..=%d keys, not %d", errs.ErrInvalidArgument, BatchOpsMax, len(ops))
	}
	seen := map[string]bool{}
	for _, op := range ops {
		if err := CheckKey(op.Key); err != nil {
			return err
		}
		if seen[op.Key] {
			return fmt.Errorf("%w: key %s twice in one write", errs.ErrInvalidArgument, op.Key)
		}
		seen[op.Key] = true
		if b.o.ValueMax > 0 && len(op.Value) > b.o.ValueMax {
			return fmt.Errorf("%w: value of %d bytes is over %d", errs.ErrInvalidArgument, len(op.Value), b.o.ValueMax)
		}
	}
	return nil
}

// CheckKey reports whether key is a valid KV key ([-/_=.a-zA-Z0-9], no
// leading or trailing dot).
func CheckKey(key string) error {
	if key == "" || len(key) > 255 || key[0] == '.' || key[len(key)-1] == '.' {
		return fmt.Errorf("%w: key %q", errs.ErrInvalidArgument, key)
	}
	for _, c := range key {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-/_=.", c)
		if !ok {
			return fmt.Errorf("%w: key %q has %q", errs.ErrInvalidArgument, key, c)
		}
	}
	return nil
}

func keysOf(ops []Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.Key
	}
	return out
}

func basesOf(ops []Op) []uint64 {
	out := make([]uint64, len(ops))
	for i, op := range ops {
		out[i] = op.Expect
	}
	return out
}

// MsgID is the message id of op i of a change: the change id itself for a
// single key, changeID/i in a batch.
func MsgID(changeID string, i, n int) string {
	if n == 1 {
		return changeID
	}
	return changeID + "/" + strconv.Itoa(i)
}

// ChangeOf returns the change id a message id belongs to.
func ChangeOf(msgID string) string {
	if i := strings.LastIndexByte(msgID, '/'); i > 0 {
		if _, err := strconv.Atoi(msgID[i+1:]); err == nil {
			return msgID[:i]
		}
	}
	return msgID
}

func (b *Bucket) messages(changeID string, ops []Op, inbox string) []*nats.Msg {
	out := make([]*nats.Msg, len(ops))
	batch := ""
	if len(ops) > 1 {
		// A fresh batch id per attempt; the message ids stay the change's.
		batch = nats.NewInbox()[len(nats.InboxPrefix):]
	}
	for i, op := range ops {
		m := nats.NewMsg(b.subject(op.Key))
		m.Header.Set(hdrMsgID, MsgID(changeID, i, len(ops)))
		m.Header.Set(hdrExpectSubj, strconv.FormatUint(op.Expect, 10))
		if op.Delete {
			m.Header.Set(hdrOperation, opDelete)
		} else {
			m.Data = op.Value
		}
		if batch != "" {
			m.Header.Set(hdrBatchID, batch)
			m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
			if i == len(ops)-1 {
				m.Header.Set(hdrBatchCommit, "1")
			}
		}
		if i == len(ops)-1 {
			m.Reply = inbox
		}
		out[i] = m
	}
	return out
}

type pubAck struct {
	Stream    string    `json:"stream"`
	Seq       uint64    `json:"seq"`
	Duplicate bool      `json:"duplicate"`
	Error     *apiError `json:"error"`
}

type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (jetstream %d/%d)", e.Description, e.Code, e.ErrCode)
}

// JetStream error codes this package decides on.
const (
	codeNoMessage         = 10037
	codeMsgTooLarge       = 10054
	codeWrongLastSeq      = 10071
	codeWrongLastSeqConst = 10164 // another write of the key is in flight
	codeDupInFlight       = 10158 // a message with this id is in flight
	codeAtomicDisabled    = 10174
	codeBatchHasDuplicate = 10201 // a message of the batch was stored before
)

// attempt publishes the change once and classifies the answer.
func (b *Bucket) attempt(ctx context.Context, changeID string, ops []Op) (Result, outcome, error) {
	if !b.nc.IsConnected() {
		return Result{}, outRefused, fmt.Errorf("not connected to the cluster (%v)", b.nc.Status())
	}
	inbox := b.nc.NewInbox()
	sub, err := b.nc.SubscribeSync(inbox)
	if err != nil {
		return Result{}, outRefused, err
	}
	defer sub.Unsubscribe()
	for _, m := range b.messages(changeID, ops, inbox) {
		// Buffering while reconnecting is off: an error here means this
		// message never left, and a batch without its commit never applies.
		if err := b.nc.PublishMsg(m); err != nil {
			return Result{}, outRefused, err
		}
	}
	reply, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return Result{}, outUnknown, err
	}
	if reply.Header.Get("Status") == "503" {
		return Result{}, outRefused, nats.ErrNoResponders // no stream leader took it
	}
	var ack pubAck
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return Result{}, outUnknown, fmt.Errorf("unreadable answer %q: %v", reply.Data, err)
	}
	if ack.Error == nil {
		return Result{Revision: ack.Seq, Duplicate: ack.Duplicate}, outStored, nil
	}
	switch ack.Error.ErrCode {
	case codeWrongLastSeq, codeWrongLastSeqConst:
		return Result{}, outConflict, ack.Error
	case codeDupInFlight:
		return Result{}, outPending, ack.Error
	case codeBatchHasDuplicate:
		// A batch is stored whole or not at all: one message of ours being
		// there means all are. Read back where the last one landed.
		rev, err := b.findChange(ctx, changeID, ops)
		if err != nil {
			return Result{}, outUnknown, fmt.Errorf("%v; locating it: %v", ack.Error, err)
		}
		return Result{Revision: rev, Duplicate: true}, outStored, nil
	case codeMsgTooLarge, codeAtomicDisabled:
		return Result{}, outInvalid, ack.Error
	}
	return Result{}, outRefused, ack.Error
}

// findChange returns the highest revision among ops' keys that carries one
// of the change's message ids, read from the stream leader.
func (b *Bucket) findChange(ctx context.Context, changeID string, ops []Op) (uint64, error) {
	var rev uint64
	for _, op := range ops {
		e, err := b.LeaderLast(ctx, op.Key)
		if err != nil && !errors.Is(err, errs.ErrNotFound) {
			return 0, err
		}
		if err == nil && ChangeOf(e.MsgID) == changeID {
			rev = max(rev, e.Revision)
		}
	}
	if rev == 0 {
		return 0, errors.New("its keys have moved on since")
	}
	return rev, nil
}
