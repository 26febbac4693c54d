// Package natskv is a JetStream key-value bucket as a fleet needs it: the
// stream is created or bound idempotently (any number of appliances may
// start at once on a fresh cluster), every write says honestly what
// happened to it (stored, refused, or unknown), and an in-memory mirror is
// kept in step with the stream by a watch whose health is checked against
// the stream leader's last sequence, not against itself.
//
// Buckets stay compatible with JetStream KV (stream KV_<bucket>, subjects
// $KV.<bucket>.<key>, KV-Operation headers), so `nats kv` tools read them.
package natskv

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Limits and defaults.
const (
	HistoryMax = 4096 // values kept per key
	// DuplicateWindow is how long the stream remembers a change id
	// (Nats-Msg-Id): a write repeated with the same id within it is not
	// applied twice.
	DuplicateWindow = 2 * time.Minute
	// BatchOpsMax bounds the keys of one atomic write.
	BatchOpsMax = 16
	// ChangeIDLenMax bounds a change id (the stream's message id).
	ChangeIDLenMax = 64
	// OpenWaitMax bounds how long Open waits for a cluster that has no
	// JetStream leader yet (fresh cluster, election after a node stopped).
	OpenWaitMax = 60 * time.Second
	// CheckIntervalDefault: how often the mirror compares itself with the
	// stream leader's last sequence.
	CheckIntervalDefault = 200 * time.Millisecond
	// catchUpReadsMax bounds the leader reads of one check; a mirror
	// further behind goes on at the next check (without waiting).
	catchUpReadsMax = 256
)

// Headers of the KV layout and of JetStream.
const (
	hdrOperation   = "KV-Operation"
	opDelete       = "DEL"
	opPurge        = "PURGE"
	hdrMsgID       = "Nats-Msg-Id"
	hdrExpectSubj  = "Nats-Expected-Last-Subject-Sequence"
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// Options configure one bucket.
type Options struct {
	Bucket      string // KV bucket name; the stream is KV_<Bucket>
	Description string
	Replicas    int           // 1..=5
	History     int           // values kept per key; 0: 1
	ValueMax    int           // bytes; 0: no limit but the server's
	OpTimeout   time.Duration // bound of one write (all its attempts) or read; 0: 5 s
	// CheckInterval: how often the mirror reads the stream leader's last
	// sequence; a watch behind it for two intervals is re-created. 0:
	// CheckIntervalDefault.
	CheckInterval time.Duration
	Log           *slog.Logger
}

func (o *Options) defaults() {
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.History < 1 {
		o.History = 1
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = CheckIntervalDefault
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Bucket is one KV bucket: writes, and (once Start ran) its mirror.
type Bucket struct {
	o      Options
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string // KV_<bucket>
	prefix string // $KV.<bucket>.
	mirror mirror
}

// StreamName is the stream behind a bucket.
func StreamName(bucket string) string { return "KV_" + bucket }

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.o.Bucket }

func (b *Bucket) subject(key string) string { return b.prefix + key }

// CheckChangeID reports whether id is usable as a change id: 1..=64 bytes of
// [A-Za-z0-9_.:-] (a Nats-Msg-Id, kept with the change in the stream).
func CheckChangeID(id string) error {
	if id == "" || len(id) > ChangeIDLenMax {
		return fmt.Errorf("%w: change id must be 1..=%d bytes", errs.ErrInvalidArgument, ChangeIDLenMax)
	}
	for _, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
		if !ok {
			return fmt.Errorf("%w: change id %q has %q (allowed: A-Z a-z 0-9 _ . : -)", errs.ErrInvalidArgument, id, c)
		}
	}
	return nil
}
