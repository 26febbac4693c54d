package natskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-ai/sluice/go-control/internal/change"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Reads from the stream leader ($JS.API.STREAM.MSG.GET, which only the
// leader answers), not a direct get that any replica (perhaps one still
// catching up) may answer: these are the reads the mirror checks itself
// against.

type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
}

type storedMsg struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Header  []byte    `json:"hdrs"`
	Data    []byte    `json:"data"`
	Time    time.Time `json:"time"`
}

type msgGetResponse struct {
	Message *storedMsg `json:"message"`
	Error   *apiError  `json:"error"`
}

func (b *Bucket) leaderGet(ctx context.Context, req msgGetRequest) (Entry, error) {
	body, _ := json.Marshal(req)
	reply, err := b.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+b.stream, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return Entry{}, fmt.Errorf("%w: bucket %s has no stream leader", errs.ErrUnavailable, b.o.Bucket)
		}
		return Entry{}, fmt.Errorf("%w: bucket %s: leader read: %v", errs.ErrUnavailable, b.o.Bucket, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(reply.Data, &r); err != nil {
		return Entry{}, fmt.Errorf("%w: bucket %s: leader read: %v", errs.ErrIO, b.o.Bucket, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == codeNoMessage {
			return Entry{}, errs.ErrNotFound
		}
		return Entry{}, fmt.Errorf("%w: bucket %s: leader read: %v", errs.ErrUnavailable, b.o.Bucket, r.Error)
	}
	if r.Message == nil {
		return Entry{}, fmt.Errorf("%w: bucket %s: leader read: empty answer", errs.ErrIO, b.o.Bucket)
	}
	var h nats.Header
	if len(r.Message.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(r.Message.Header); err != nil {
			return Entry{}, fmt.Errorf("%w: bucket %s: headers of %d: %v", errs.ErrIO, b.o.Bucket, r.Message.Seq, err)
		}
	}
	return b.entryOf(r.Message.Subject, h, r.Message.Data, r.Message.Seq, r.Message.Time), nil
}

// leaderNext returns the first message at or after seq (errs.ErrNotFound:
// none, the mirror has all the leader has).
func (b *Bucket) leaderNext(ctx context.Context, seq uint64) (Entry, error) {
	return b.leaderGet(ctx, msgGetRequest{Seq: seq, NextFor: b.prefix + ">"})
}

// LeaderLast returns key's latest message (a delete marker included) as
// the stream leader has it.
func (b *Bucket) LeaderLast(ctx context.Context, key string) (Entry, error) {
	if err := CheckKey(key); err != nil {
		return Entry{}, err
	}
	return b.leaderGet(ctx, msgGetRequest{LastFor: b.subject(key)})
}

// LeaderSeq returns the message at seq (errs.ErrNotFound: none there: never
// written, or removed since). The fault checker reads a bucket's history
// with it.
func (b *Bucket) LeaderSeq(ctx context.Context, seq uint64) (Entry, error) {
	return b.leaderGet(ctx, msgGetRequest{Seq: seq})
}

func (b *Bucket) entryOf(subject string, h nats.Header, data []byte, seq uint64, at time.Time) Entry {
	e := Entry{Key: subject[min(len(b.prefix), len(subject)):], Value: data, Revision: seq, Time: at}
	if h != nil {
		op := h.Get(hdrOperation)
		e.Deleted = op == opDelete || op == opPurge
		e.MsgID = h.Get(hdrMsgID)
		e.ChangeID = change.Of(e.MsgID)
	}
	if e.Deleted {
		e.Value = nil
	}
	return e
}

// directNext is leaderNext answered by any replica ($JS.API.DIRECT.GET):
// when the leader read fails (no meta leader while the cluster recovers
// from losing its quorum, a leader being elected), a replica still has
// every message it has applied, all committed, so the mirror can move
// forward; it never moves back. Not found is errs.ErrNotFound (this replica
// has nothing after seq), and says nothing of the leader.
func (b *Bucket) directNext(ctx context.Context, seq uint64) (Entry, error) {
	body, _ := json.Marshal(msgGetRequest{Seq: seq, NextFor: b.prefix + ">"})
	reply, err := b.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+b.stream, body)
	if err != nil {
		return Entry{}, fmt.Errorf("%w: bucket %s: replica read: %v", errs.ErrUnavailable, b.o.Bucket, err)
	}
	switch st := reply.Header.Get("Status"); {
	case st == "404":
		return Entry{}, errs.ErrNotFound
	case st != "":
		return Entry{}, fmt.Errorf("%w: bucket %s: replica read: status %s %s", errs.ErrUnavailable, b.o.Bucket, st,
			reply.Header.Get("Description"))
	}
	n, err := strconv.ParseUint(reply.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil || n < seq {
		return Entry{}, fmt.Errorf("%w: bucket %s: replica read: bad sequence %q", errs.ErrIO, b.o.Bucket, reply.Header.Get("Nats-Sequence"))
	}
	at, _ := time.Parse(time.RFC3339Nano, reply.Header.Get("Nats-Time-Stamp"))
	return b.entryOf(reply.Header.Get("Nats-Subject"), reply.Header, reply.Data, n, at), nil
}
