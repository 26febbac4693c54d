// Package natsstore keeps the schema registry in a NATS JetStream
// key-value bucket, so that a fleet of appliances shares one registry
// state through a real clustered store. Revisions are the bucket's stream
// sequences; every write is JetStream's own compare-and-set (expected last
// sequence of the key), and a registration's keys are written in one
// atomic batch. Reads come from the bucket's mirror (internal/natskv),
// which is checked against the stream leader.
package natsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/change"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natskv"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// DefaultBucket is the bucket name Open uses when given "".
const DefaultBucket = "sluice-registry"

// Store implements registry.Store over a JetStream KV bucket.
type Store struct {
	b      *natskv.Bucket
	stop   context.CancelFunc
	mu     sync.Mutex
	nextID int
	watch  map[int]func()
}

var _ registry.Store = (*Store)(nil)

// Options configure the store beyond its bucket name.
type Options struct {
	Replicas      int // bucket replicas (1 on a single server)
	History       int // values kept per key; 0: 1
	OpTimeout     time.Duration
	CheckInterval time.Duration
}

// Open creates the bucket or binds to it and fills its mirror (kept in step
// until Close). Close does not close the NATS connection: its owner does.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Store, error) {
	return OpenWith(ctx, js, bucket, Options{Replicas: replicas})
}

// OpenWith is Open with every option.
func OpenWith(ctx context.Context, js jetstream.JetStream, bucket string, o Options) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	b, err := natskv.Open(ctx, js, natskv.Options{Bucket: bucket, Description: "Sluice schema registry",
		Replicas: o.Replicas, History: o.History, OpTimeout: o.OpTimeout, CheckInterval: o.CheckInterval})
	if err != nil {
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	s := &Store{b: b, watch: map[int]func(){}}
	mctx, stop := context.WithCancel(context.Background())
	if err := b.Start(mctx, s.changed); err != nil {
		stop()
		return nil, fmt.Errorf("natsstore: %w", err)
	}
	s.stop = stop
	return s, nil
}

// Bucket is the bucket behind the store (status, fault checks).
func (s *Store) Bucket() *natskv.Bucket { return s.b }

func (s *Store) changed() {
	s.mu.Lock()
	fns := make([]func(), 0, len(s.watch))
	for _, fn := range s.watch {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (s *Store) snapshot() (*natskv.Snapshot, error) {
	snap := s.b.Snapshot()
	if snap == nil {
		return nil, fmt.Errorf("%w: natsstore: bucket %s not mirrored", registry.ErrUnavailable, s.b.Name())
	}
	return snap, nil
}

func (s *Store) List(ctx context.Context, prefix string) ([]registry.Entry, error) {
	snap, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	var out []registry.Entry
	for _, e := range snap.List(prefix) {
		out = append(out, registry.Entry{Key: e.Key, Value: e.Value, Revision: e.Revision})
	}
	return out, nil
}

func (s *Store) Get(ctx context.Context, key string) (registry.Entry, error) {
	snap, err := s.snapshot()
	if err != nil {
		return registry.Entry{}, err
	}
	e, ok := snap.Get(key)
	if !ok {
		return registry.Entry{}, registry.ErrNotFound
	}
	return registry.Entry{Key: key, Value: e.Value, Revision: e.Revision}, nil
}

func (s *Store) Put(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	revs, err := s.PutAll(ctx, []registry.Write{{Key: key, Value: value, Expect: expect}})
	if err != nil {
		return 0, err
	}
	return revs[0], nil
}

// PutAll writes ws in one atomic batch. The registry's expect 0 (the key
// must not exist) is the key's delete marker when it was deleted before.
func (s *Store) PutAll(ctx context.Context, ws []registry.Write) ([]uint64, error) {
	snap, err := s.snapshot()
	if err != nil {
		return nil, err
	}
	ops := make([]natskv.Op, len(ws))
	for i, w := range ws {
		expect := w.Expect
		if expect == 0 {
			if _, live := snap.Get(w.Key); !live {
				expect = snap.KeyRevision(w.Key)
			}
		}
		ops[i] = natskv.Op{Key: w.Key, Value: w.Value, Expect: expect}
	}
	res, err := s.b.Write(ctx, change.WriteID(ctx), ops...)
	if err != nil {
		return nil, s.mapErr(ctx, err)
	}
	// A batch's messages take consecutive sequences.
	revs := make([]uint64, len(ws))
	for i := range ws {
		revs[i] = res.Revision - uint64(len(ws)-1-i)
	}
	change.Note(ctx, s.b.Name(), res.Revision, res.Duplicate)
	// Read your writes: the registry may reload right after.
	s.waitMirror(ctx, res.Revision)
	return revs, nil
}

func (s *Store) Delete(ctx context.Context, key string, expect uint64) error {
	snap, err := s.snapshot()
	if err != nil {
		return err
	}
	if _, ok := snap.Get(key); !ok {
		return registry.ErrNotFound
	}
	res, err := s.b.Write(ctx, change.WriteID(ctx), natskv.Op{Key: key, Delete: true, Expect: expect})
	if err != nil {
		return s.mapErr(ctx, err)
	}
	change.Note(ctx, s.b.Name(), res.Revision, res.Duplicate)
	s.waitMirror(ctx, res.Revision)
	return nil
}

// mirrorWaitMax bounds a writer's wait for its own write in the mirror.
const mirrorWaitMax = 5 * time.Second

func (s *Store) waitMirror(ctx context.Context, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, mirrorWaitMax)
	defer cancel()
	s.b.WaitMirror(ctx, rev)
}

// mapErr turns a natskv outcome into the registry's sentinels; after a lost
// compare-and-set the mirror is brought up to the leader first, so that
// the registry's reload and retry start from the winner's write.
func (s *Store) mapErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, errs.ErrConflict):
		_ = s.b.Sync(ctx)
		return fmt.Errorf("%w: %v", registry.ErrRevisionMismatch, err)
	case errors.Is(err, errs.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %v", registry.ErrOutcomeUnknown, err)
	case errors.Is(err, errs.ErrUnavailable):
		return fmt.Errorf("%w: %v", registry.ErrUnavailable, err)
	}
	return fmt.Errorf("natsstore: %w", err)
}

// Close stops the mirror.
func (s *Store) Close() error {
	if s.stop != nil {
		s.stop()
	}
	return nil
}

// Watch calls onChange after every new snapshot of the bucket (a write by
// any appliance, this one included, or a catch-up from the stream leader)
// until ctx ends. Wire it to Registry.Refresh so that each appliance's data
// plane hears of schemas registered elsewhere.
func (s *Store) Watch(ctx context.Context, onChange func()) error {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.watch[id] = onChange
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		delete(s.watch, id)
		s.mu.Unlock()
	}()
	return nil
}

// Revision is the revision of the bucket the mirror is at.
func (s *Store) Revision() uint64 {
	if snap := s.b.Snapshot(); snap != nil {
		return snap.Revision
	}
	return 0
}
