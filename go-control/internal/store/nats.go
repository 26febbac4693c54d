package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Kinds of control state, one JetStream KV bucket each (named
// BUCKETPREFIX_KIND). A store key goes to the bucket of its kind, unchanged,
// so the daemon's keys stay what the embedded store holds.
var natsKinds = []struct {
	kind   string
	match  string // exact key, or key prefix when it ends in "."
	prefix bool
}{
	{"routes", "routes", false},
	{"tenants", "tenants", false},
	{"models", "model.", true},
	{"aliases", "alias.", true},
	{"peers", "peer.", true},
	{"peers", "peergone.", true},
}

// natsOtherKind holds any key no kind claims (none today).
const natsOtherKind = "control"

// NATSOptions configure the fleet store.
type NATSOptions struct {
	BucketPrefix string        // "" : "sluice"
	Replicas     int           // bucket replicas; 3 on a 3-node cluster
	OpTimeout    time.Duration // per call; 0: 5 s
}

// NATS keeps the control state in JetStream KV buckets shared by a fleet.
// Every write is a compare-and-set against the revision this appliance last
// read or wrote for the key (Create when it saw none), so an appliance
// working from a stale view cannot overwrite another's update: the write
// fails with errs.ErrBusy and the caller retries once its view is fresh.
type NATS struct {
	buckets   map[string]jetstream.KeyValue // by kind
	opTimeout time.Duration

	mu   sync.Mutex
	seen map[string]uint64 // key -> revision last read or written; absent: none seen
	// mirror holds every key's latest value while a Watch runs, so reads
	// cost no round trip; nil when no Watch is in sync.
	mirror    map[string]mirrored
	mirrorGen uint64 // which Watch published mirror
}

type mirrored struct {
	value   []byte
	rev     uint64
	deleted bool // kept so that an older write arriving late is ignored
}

// mirrorSet records a write at rev unless the mirror already holds a newer
// one. Callers hold n.mu.
func mirrorSet(m map[string]mirrored, key string, value []byte, rev uint64, deleted bool) {
	if old, ok := m[key]; ok && old.rev >= rev {
		return
	}
	m[key] = mirrored{value: value, rev: rev, deleted: deleted}
}

var _ Store = (*NATS)(nil)

// BucketNames lists the buckets a prefix yields, in a fixed order.
func BucketNames(prefix string) []string {
	if prefix == "" {
		prefix = "sluice"
	}
	var out []string
	for _, k := range natsKindNames() {
		out = append(out, prefix+"_"+k)
	}
	return out
}

func natsKindNames() []string {
	out := []string{}
	for _, k := range natsKinds {
		if len(out) == 0 || out[len(out)-1] != k.kind {
			out = append(out, k.kind)
		}
	}
	return append(out, natsOtherKind)
}

// OpenNATS creates the buckets if they do not exist and returns the store.
// Close does not close the NATS connection: its owner does.
func OpenNATS(ctx context.Context, js jetstream.JetStream, o NATSOptions) (*NATS, error) {
	if o.BucketPrefix == "" {
		o.BucketPrefix = "sluice"
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	n := &NATS{buckets: map[string]jetstream.KeyValue{}, opTimeout: o.OpTimeout, seen: map[string]uint64{}}
	for _, kind := range natsKindNames() {
		name := o.BucketPrefix + "_" + kind
		kv, err := openBucket(ctx, js, name, kind, o)
		if err != nil {
			return nil, fmt.Errorf("%w: nats bucket %s: %w", errs.ErrIO, name, err)
		}
		n.buckets[kind] = kv
	}
	return n, nil
}

// openRetryMax bounds how long opening the buckets waits out a cluster that
// is electing a leader (a node just stopped or restarted).
const openRetryMax = 20 * time.Second

// openBucket looks a bucket up, creating it when missing, and retries
// transient cluster errors with backoff until openRetryMax has passed.
func openBucket(ctx context.Context, js jetstream.JetStream, name, kind string, o NATSOptions) (jetstream.KeyValue, error) {
	deadline := time.Now().Add(openRetryMax)
	backoff := 100 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, o.OpTimeout)
		// Look up first: updating an existing stream's config needs every
		// replica, and one may be down or catching up.
		kv, err := js.KeyValue(cctx, name)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(cctx, jetstream.KeyValueConfig{
				Bucket:       name,
				Description:  "Sluice control state: " + kind,
				History:      1,
				Replicas:     o.Replicas,
				MaxValueSize: ValueSizeMax,
			})
			if errors.Is(err, jetstream.ErrBucketExists) { // another appliance won the race
				kv, err = js.KeyValue(cctx, name)
			}
		}
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return kv, err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}

func kindOf(key string) string {
	for _, k := range natsKinds {
		if k.prefix && strings.HasPrefix(key, k.match) || !k.prefix && key == k.match {
			return k.kind
		}
	}
	return natsOtherKind
}

func (n *NATS) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), n.opTimeout)
}

func (n *NATS) note(key string, rev uint64) {
	n.mu.Lock()
	if rev == 0 {
		delete(n.seen, key)
	} else {
		n.seen[key] = rev
	}
	n.mu.Unlock()
}

func (n *NATS) seenRev(key string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.seen[key]
}

func ioErr(op, key string, err error) error {
	return fmt.Errorf("%w: nats %s %s: %w", errs.ErrIO, op, key, err)
}

func conflict(key string) error {
	return fmt.Errorf("%w: %s was changed by another appliance; retry once this one has caught up", errs.ErrBusy, key)
}

// Get implements Store and remembers the revision read.
func (n *NATS) Get(key string) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	n.mu.Lock()
	if n.mirror != nil {
		m, ok := n.mirror[key]
		ok = ok && !m.deleted
		if ok {
			n.seen[key] = m.rev
		} else {
			delete(n.seen, key)
		}
		n.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: key %q", errs.ErrNotFound, key)
		}
		return slices.Clone(m.value), nil
	}
	n.mu.Unlock()
	ctx, cancel := n.ctx()
	defer cancel()
	e, err := n.buckets[kindOf(key)].Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		n.note(key, 0)
		return nil, fmt.Errorf("%w: key %q", errs.ErrNotFound, key)
	}
	if err != nil {
		return nil, ioErr("get", key, err)
	}
	n.note(key, e.Revision())
	return e.Value(), nil
}

// Put implements Store as a compare-and-set (see NATS).
func (n *NATS) Put(key string, value []byte) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if len(value) > ValueSizeMax {
		return fmt.Errorf("%w: value of %d bytes is over %d", errs.ErrInvalidArgument, len(value), ValueSizeMax)
	}
	kv := n.buckets[kindOf(key)]
	ctx, cancel := n.ctx()
	defer cancel()
	var rev uint64
	var err error
	if last := n.seenRev(key); last == 0 {
		rev, err = kv.Create(ctx, key, value)
	} else {
		rev, err = kv.Update(ctx, key, value, last)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return conflict(key)
	}
	if err != nil {
		return ioErr("put", key, err)
	}
	n.note(key, rev)
	n.mu.Lock()
	if n.mirror != nil {
		mirrorSet(n.mirror, key, slices.Clone(value), rev, false)
	}
	n.mu.Unlock()
	return nil
}

// Delete implements Store as a compare-and-set; deleting a key that is
// missing in this appliance's view and in the bucket is not an error.
func (n *NATS) Delete(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	kv := n.buckets[kindOf(key)]
	ctx, cancel := n.ctx()
	defer cancel()
	last := n.seenRev(key)
	if last == 0 {
		_, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return ioErr("delete", key, err)
		}
		return conflict(key) // created elsewhere since we last looked
	}
	err := kv.Delete(ctx, key, jetstream.LastRevision(last))
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return conflict(key)
	}
	if err != nil {
		return ioErr("delete", key, err)
	}
	n.note(key, 0)
	n.mu.Lock()
	if n.mirror != nil {
		// The delete marker's revision is not returned; last+1 is a lower
		// bound, and the watch brings the marker itself.
		mirrorSet(n.mirror, key, nil, last+1, true)
	}
	n.mu.Unlock()
	return nil
}

// List implements Store: the latest value of every key with prefix, from
// the buckets that can hold such keys, and remembers their revisions.
func (n *NATS) List(prefix string) ([]Entry, error) {
	var out []Entry
	seenNow := map[string]uint64{}
	n.mu.Lock()
	mirror := n.mirror
	for k, m := range mirror {
		if !m.deleted && strings.HasPrefix(k, prefix) {
			out = append(out, Entry{Key: k, Value: slices.Clone(m.value)})
			seenNow[k] = m.rev
		}
	}
	n.mu.Unlock()
	for _, kind := range natsKindNames() {
		if mirror != nil {
			break
		}
		if !n.kindMayHold(kind, prefix) {
			continue
		}
		es, err := n.listBucket(n.buckets[kind], prefix)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out = append(out, Entry{Key: e.Key(), Value: e.Value()})
			seenNow[e.Key()] = e.Revision()
		}
	}
	n.mu.Lock()
	// Keys under prefix that are gone now are no longer seen.
	for k := range n.seen {
		if strings.HasPrefix(k, prefix) {
			delete(n.seen, k)
		}
	}
	for k, r := range seenNow {
		n.seen[k] = r
	}
	n.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (n *NATS) kindMayHold(kind, prefix string) bool {
	if kind == natsOtherKind {
		return true
	}
	for _, k := range natsKinds {
		if k.kind != kind {
			continue
		}
		if strings.HasPrefix(k.match, prefix) || k.prefix && strings.HasPrefix(prefix, k.match) {
			return true
		}
	}
	return false
}

func (n *NATS) listBucket(kv jetstream.KeyValue, prefix string) ([]jetstream.KeyValueEntry, error) {
	ctx, cancel := n.ctx()
	defer cancel()
	// WatchAll delivers the latest value of every key, then a nil marker.
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, ioErr("list", kv.Bucket(), err)
	}
	defer w.Stop()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, ioErr("list", kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, ioErr("list", kv.Bucket(), errors.New("watcher closed"))
			}
			if e == nil {
				return out, nil
			}
			if strings.HasPrefix(e.Key(), prefix) {
				out = append(out, e)
			}
		}
	}
}

// Watch mirrors the buckets into memory (reads are then served from the
// mirror) and calls onChange after every write applied to it from now on,
// by any appliance, this one included, until ctx ends. It returns once the
// mirror holds every key's latest value. The callback only signals: the
// caller re-reads the whole state, so merged calls lose nothing.
func (n *NATS) Watch(ctx context.Context, onChange func()) error {
	ctx, cancel := context.WithCancel(ctx)
	mirror := map[string]mirrored{}
	synced := make(chan struct{}, len(n.buckets))
	var wg sync.WaitGroup
	fail := func(err error) error {
		cancel()
		wg.Wait()
		return err
	}
	for _, kind := range natsKindNames() {
		w, err := n.buckets[kind].WatchAll(ctx)
		if err != nil {
			return fail(ioErr("watch", kind, err))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			initial := true
			for {
				select {
				case <-ctx.Done():
					return
				case e, ok := <-w.Updates():
					if !ok {
						// The watch ended under us: reads go back to the
						// server until the caller watches again.
						cancel()
						return
					}
					if e == nil {
						if initial {
							initial = false
							synced <- struct{}{}
						}
						continue
					}
					n.mu.Lock()
					mirrorSet(mirror, e.Key(), e.Value(), e.Revision(), e.Operation() != jetstream.KeyValuePut)
					n.mu.Unlock()
					if !initial {
						onChange()
					}
				}
			}
		}()
	}
	timeout := time.NewTimer(n.opTimeout)
	defer timeout.Stop()
	for range n.buckets {
		select {
		case <-synced:
		case <-ctx.Done():
			return fail(ioErr("watch", "buckets", ctx.Err()))
		case <-timeout.C:
			return fail(ioErr("watch", "buckets", errors.New("initial values did not arrive in time")))
		}
	}
	n.mu.Lock()
	n.mirrorGen++
	gen := n.mirrorGen
	n.mirror = mirror
	n.mu.Unlock()
	go func() {
		<-ctx.Done()
		wg.Wait()
		n.mu.Lock()
		if n.mirrorGen == gen {
			n.mirror = nil
		}
		n.mu.Unlock()
		cancel()
	}()
	return nil
}

// Watching reports whether a Watch is running and in sync (reads are
// served from its mirror).
func (n *NATS) Watching() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mirror != nil
}

// Close implements Store.
func (n *NATS) Close() error { return nil }
