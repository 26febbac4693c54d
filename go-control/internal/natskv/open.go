package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// streamConfig is the bucket's stream: the KV layout (as `nats kv add`
// makes it), plus atomic batches for writes that touch several keys.
func (b *Bucket) streamConfig() jetstream.StreamConfig {
	maxMsg := int32(-1)
	if b.o.ValueMax > 0 {
		maxMsg = int32(b.o.ValueMax + 4096) // room for the headers
	}
	return jetstream.StreamConfig{
		Name:               b.stream,
		Description:        b.o.Description,
		Subjects:           []string{b.prefix + ">"},
		MaxMsgsPerSubject:  int64(b.o.History),
		MaxBytes:           -1,
		MaxMsgSize:         maxMsg,
		MaxMsgs:            -1,
		MaxConsumers:       -1,
		Storage:            jetstream.FileStorage,
		Replicas:           b.o.Replicas,
		AllowRollup:        true,
		DenyDelete:         true,
		AllowDirect:        true,
		Discard:            jetstream.DiscardNew,
		Duplicates:         DuplicateWindow,
		AllowAtomicPublish: true,
	}
}

// Open creates the bucket's stream or binds to it, waiting (up to
// OpenWaitMax, or ctx) for a cluster that cannot answer yet. Several
// appliances opening the same bucket at once all succeed: a create that
// loses the race, or whose answer was lost, binds on the next round.
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Bucket, error) {
	o.defaults()
	if o.History > HistoryMax {
		return nil, fmt.Errorf("%w: history %d is over %d", errs.ErrInvalidArgument, o.History, HistoryMax)
	}
	b := &Bucket{o: o, nc: js.Conn(), js: js, stream: StreamName(o.Bucket), prefix: "$KV." + o.Bucket + "."}
	b.mirror.init(b)
	want := b.streamConfig()
	deadline := time.Now().Add(OpenWaitMax)
	backoff := 50 * time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		err := b.ensure(ctx, want)
		if err == nil {
			return b, nil
		}
		if !transient(err) {
			return nil, fmt.Errorf("%w: bucket %s: %v", errs.ErrIO, o.Bucket, err)
		}
		last = err
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("%w: bucket %s: the cluster did not answer within %v (last: %v)", errs.ErrUnavailable, o.Bucket, OpenWaitMax, last)
		}
		if attempt%20 == 0 {
			o.Log.Warn("waiting for the JetStream cluster", "bucket", o.Bucket, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// ensure makes one round of look-up, create, or update.
func (b *Bucket) ensure(ctx context.Context, want jetstream.StreamConfig) error {
	cctx, cancel := context.WithTimeout(ctx, b.o.OpTimeout)
	defer cancel()
	// Look up first: creating needs the meta leader and an exact match of
	// the config, binding needs neither.
	s, err := b.js.Stream(cctx, b.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = b.js.CreateStream(cctx, want)
		if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created, or another appliance won: bind on the next round.
			return errRetryBind
		}
		return err
	}
	if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	if have.MaxMsgsPerSubject == want.MaxMsgsPerSubject && have.AllowAtomicPublish && have.Duplicates >= want.Duplicates &&
		have.AllowRollup && have.DenyDelete {
		if have.Replicas != want.Replicas {
			b.o.Log.Warn("bucket replicas differ from the config; keeping the cluster's", "bucket", b.o.Bucket,
				"have", have.Replicas, "config", want.Replicas)
		}
		return nil
	}
	// An older bucket (or another history setting): update the fields this
	// package relies on, keeping the rest.
	up := have
	up.MaxMsgsPerSubject, up.AllowAtomicPublish, up.AllowRollup, up.DenyDelete = want.MaxMsgsPerSubject, true, true, true
	up.Duplicates = max(have.Duplicates, want.Duplicates)
	if _, err := b.js.UpdateStream(cctx, up); err != nil {
		return err
	}
	b.o.Log.Info("bucket updated", "bucket", b.o.Bucket, "history", want.MaxMsgsPerSubject)
	return errRetryBind
}

var errRetryBind = errors.New("created; bind on the next round")

// transient reports whether err may pass by itself: the cluster is
// electing, not reachable yet, or our create raced another's.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamNameInUse, 10008 /* cluster not available */, 10005, /* no peers */
			jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return true
		}
		return apiErr.Code >= 500
	}
	return errors.Is(err, errRetryBind) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrReconnectBufExceeded)
}
