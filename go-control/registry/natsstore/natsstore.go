// Package natsstore keeps the schema registry in a NATS JetStream
// key-value bucket, so that a fleet of appliances shares one registry
// state through a real clustered store. Revisions are the bucket's stream
// sequences; every write is JetStream's own compare-and-set (Create,
// Update at a revision, Delete at a revision).
package natsstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/registry"
)

// DefaultBucket is the bucket name Open uses when given "".
const DefaultBucket = "sluice-registry"

// Store implements registry.Store over a JetStream KV bucket.
type Store struct {
	kv jetstream.KeyValue
}

var _ registry.Store = (*Store)(nil)

// Open creates the bucket if it does not exist (one value per key, no
// history: the registry keeps its own versions) and returns the store.
// replicas is the bucket's replication factor (1 on a single server).
// Close does not close the NATS connection: its owner does.
func Open(ctx context.Context, js jetstream.JetStream, bucket string, replicas int) (*Store, error) {
	if bucket == "" {
		bucket = DefaultBucket
	}
	if replicas < 1 {
		replicas = 1
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "Sluice schema registry",
		History:     1,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natsstore: bucket %q: %w", bucket, err)
	}
	return &Store{kv: kv}, nil
}

func (s *Store) List(ctx context.Context, prefix string) ([]registry.Entry, error) {
	// WatchAll delivers the latest value of every key, then a nil marker.
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsstore: list: %w", err)
	}
	defer w.Stop()
	var out []registry.Entry
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("natsstore: list: watcher closed")
			}
			if e == nil {
				sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
				return out, nil
			}
			if strings.HasPrefix(e.Key(), prefix) {
				out = append(out, registry.Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision()})
			}
		}
	}
}

func (s *Store) Get(ctx context.Context, key string) (registry.Entry, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return registry.Entry{}, registry.ErrNotFound
	}
	if err != nil {
		return registry.Entry{}, fmt.Errorf("natsstore: get %s: %w", key, err)
	}
	return registry.Entry{Key: key, Value: e.Value(), Revision: e.Revision()}, nil
}

func (s *Store) Put(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	var rev uint64
	var err error
	if expect == 0 {
		rev, err = s.kv.Create(ctx, key, value)
	} else {
		rev, err = s.kv.Update(ctx, key, value, expect)
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return 0, fmt.Errorf("%w: %s", registry.ErrRevisionMismatch, key)
	case err != nil:
		return 0, fmt.Errorf("natsstore: put %s: %w", key, err)
	}
	return rev, nil
}

func (s *Store) Delete(ctx context.Context, key string, expect uint64) error {
	if _, err := s.Get(ctx, key); err != nil {
		return err
	}
	err := s.kv.Delete(ctx, key, jetstream.LastRevision(expect))
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("%w: %s", registry.ErrRevisionMismatch, key)
	case err != nil:
		return fmt.Errorf("natsstore: delete %s: %w", key, err)
	}
	return nil
}

func (s *Store) Close() error { return nil }

// Watch calls onChange after every write to the bucket made from now on
// (by any appliance, this one included) until ctx ends. Wire it to
// Registry.Refresh so that each appliance's data plane hears of schemas
// registered elsewhere.
// resyncEvery bounds how stale a watching registry can be when an update
// notification is lost.
const resyncEvery = time.Second

func (s *Store) Watch(ctx context.Context, onChange func()) error {
	w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("natsstore: watch: %w", err)
	}
	go func() {
		defer w.Stop()
		// Anti-entropy: a refresh every resyncEvery as well, so an update
		// read mid-way through a multi-key write, or missed while the watch
		// consumer was being (re)created, is still picked up.
		tick := time.NewTicker(resyncEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				onChange()
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil {
					onChange()
				}
			}
		}
	}()
	return nil
}
