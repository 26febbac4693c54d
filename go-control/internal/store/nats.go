package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natskv"
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
	{"models", "modelgone.", true}, // a file model unloaded through the API
	{"aliases", "alias.", true},
	{"peers", "peer.", true},
	{"peers", "peergone.", true},
}

// natsOtherKind holds any key no kind claims: the schema transforms
// ("transform.", internal/daemon/transforms.go).
const natsOtherKind = "control"

// NATSOptions configure the fleet store.
type NATSOptions struct {
	BucketPrefix  string        // "" : "sluice"
	Replicas      int           // bucket replicas; 3 on a 3-node cluster
	History       int           // values kept per key; 0: 1
	OpTimeout     time.Duration // per call; 0: 5 s
	CheckInterval time.Duration // mirror against the stream leader; 0: natskv's default
	Log           *slog.Logger
}

// NATS keeps the control state in JetStream KV buckets shared by a fleet.
// Reads come from each bucket's mirror (natskv), which Start keeps in step
// with the stream. Every write is a compare-and-set against the revision
// the writer's view holds for the key, so an appliance working from a
// stale view cannot overwrite another's update: the write fails with
// errs.ErrConflict and the caller retries once its view is fresh.
type NATS struct {
	buckets   map[string]*natskv.Bucket // by kind
	opTimeout time.Duration
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

// OpenNATS creates the buckets or binds to them (tolerating any number of
// appliances doing so at once) and returns the store; Start fills its
// mirrors. Close does not close the NATS connection: its owner does.
func OpenNATS(ctx context.Context, js jetstream.JetStream, o NATSOptions) (*NATS, error) {
	if o.BucketPrefix == "" {
		o.BucketPrefix = "sluice"
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	n := &NATS{buckets: map[string]*natskv.Bucket{}, opTimeout: o.OpTimeout}
	for _, kind := range natsKindNames() {
		b, err := natskv.Open(ctx, js, natskv.Options{
			Bucket: o.BucketPrefix + "_" + kind, Description: "Sluice control state: " + kind,
			Replicas: o.Replicas, History: o.History, ValueMax: ValueSizeMax,
			OpTimeout: o.OpTimeout, CheckInterval: o.CheckInterval, Log: o.Log,
		})
		if err != nil {
			return nil, err
		}
		n.buckets[kind] = b
	}
	return n, nil
}

// Start fills every bucket's mirror and keeps them in step until ctx ends;
// onChange runs after each new snapshot of any bucket.
func (n *NATS) Start(ctx context.Context, onChange func()) error {
	var all []error
	for _, kind := range natsKindNames() {
		all = append(all, n.buckets[kind].Start(ctx, onChange))
	}
	return errors.Join(all...)
}

func kindOf(key string) string {
	for _, k := range natsKinds {
		if k.prefix && strings.HasPrefix(key, k.match) || !k.prefix && key == k.match {
			return k.kind
		}
	}
	return natsOtherKind
}

// BucketOf names the bucket that holds key.
func (n *NATS) BucketOf(key string) string { return n.buckets[kindOf(key)].Name() }

// View is every bucket's latest snapshot (a consistent state per bucket).
// It is read-only: writes go through Commit with the view they were
// composed from.
func (n *NATS) View() (*View, error) {
	v := &View{snaps: map[string]*natskv.Snapshot{}}
	for kind, b := range n.buckets {
		s := b.Snapshot()
		if s == nil {
			return nil, fmt.Errorf("%w: fleet bucket %s is not mirrored yet", errs.ErrUnavailable, b.Name())
		}
		v.snaps[kind] = s
	}
	return v, nil
}

// Health describes every bucket's mirror against its stream.
func (n *NATS) Health() []natskv.Health {
	var out []natskv.Health
	for _, kind := range natsKindNames() {
		out = append(out, n.buckets[kind].Health())
	}
	return out
}

// Get implements Store, from the mirror.
func (n *NATS) Get(key string) ([]byte, error) {
	v, err := n.View()
	if err != nil {
		return nil, err
	}
	return v.Get(key)
}

// List implements Store, from the mirror.
func (n *NATS) List(prefix string) ([]Entry, error) {
	v, err := n.View()
	if err != nil {
		return nil, err
	}
	return v.List(prefix)
}

// Op is one key of a Commit: a value, or a delete.
type Op struct {
	Key    string
	Value  []byte
	Delete bool
}

// Committed is a write the store acknowledged.
type Committed struct {
	ChangeID  string
	Bucket    string
	Revision  uint64 // the bucket's revision holding the change
	Duplicate bool   // the change id had been stored before (a repeat)
}

// Commit writes ops (keys of one bucket) as one change, all or nothing,
// compare-and-set against the revisions view holds, tagged with changeID.
// Deleting a key view does not hold is dropped from the change. Errors are
// natskv.Bucket.Write's: errs.ErrConflict, errs.ErrUnavailable (nothing
// written) or errs.ErrOutcomeUnknown (*natskv.UnknownError).
func (n *NATS) Commit(ctx context.Context, view *View, changeID string, ops ...Op) (Committed, error) {
	if len(ops) == 0 {
		return Committed{}, fmt.Errorf("%w: empty change", errs.ErrInvalidArgument)
	}
	kind := kindOf(ops[0].Key)
	b := n.buckets[kind]
	snap := view.snaps[kind]
	var kv []natskv.Op
	for _, op := range ops {
		if err := CheckKey(op.Key); err != nil {
			return Committed{}, err
		}
		if kindOf(op.Key) != kind {
			return Committed{}, fmt.Errorf("%w: one change spans buckets (%s, %s)", errs.ErrInternal, ops[0].Key, op.Key)
		}
		if len(op.Value) > ValueSizeMax {
			return Committed{}, fmt.Errorf("%w: value of %d bytes is over %d", errs.ErrInvalidArgument, len(op.Value), ValueSizeMax)
		}
		if _, live := snap.Get(op.Key); op.Delete && !live {
			continue
		}
		kv = append(kv, natskv.Op{Key: op.Key, Value: op.Value, Delete: op.Delete, Expect: snap.KeyRevision(op.Key)})
	}
	c := Committed{ChangeID: changeID, Bucket: b.Name(), Revision: snap.Revision}
	if len(kv) == 0 {
		return c, nil // nothing to change
	}
	res, err := b.Write(ctx, changeID, kv...)
	if err != nil {
		return c, err
	}
	c.Revision, c.Duplicate = res.Revision, res.Duplicate
	// Read your writes: the next change composed here starts from this one.
	wctx, cancel := context.WithTimeout(ctx, n.opTimeout)
	defer cancel()
	b.WaitMirror(wctx, res.Revision)
	return c, nil
}

// NewChangeID returns a fresh change id.
func NewChangeID() string { return "sl-" + nats.NewInbox()[len(nats.InboxPrefix):] }

// Put implements Store as a compare-and-set from the current view.
func (n *NATS) Put(key string, value []byte) error {
	v, err := n.View()
	if err != nil {
		return err
	}
	_, err = n.Commit(context.Background(), v, NewChangeID(), Op{Key: key, Value: value})
	return err
}

// Delete implements Store as a compare-and-set from the current view;
// deleting a key the view does not hold is not an error.
func (n *NATS) Delete(key string) error {
	v, err := n.View()
	if err != nil {
		return err
	}
	_, err = n.Commit(context.Background(), v, NewChangeID(), Op{Key: key, Delete: true})
	return err
}

// Close implements Store.
func (n *NATS) Close() error { return nil }

// View is a read-only Store over one snapshot of every bucket.
type View struct {
	snaps map[string]*natskv.Snapshot // by kind
}

var _ Store = (*View)(nil)

// Get implements Store.
func (v *View) Get(key string) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	e, ok := v.snaps[kindOf(key)].Get(key)
	if !ok {
		return nil, fmt.Errorf("%w: key %q", errs.ErrNotFound, key)
	}
	return slices.Clone(e.Value), nil
}

// List implements Store.
func (v *View) List(prefix string) ([]Entry, error) {
	var out []Entry
	for kind, s := range v.snaps {
		if !kindMayHold(kind, prefix) {
			continue
		}
		for _, e := range s.List(prefix) {
			out = append(out, Entry{Key: e.Key, Value: slices.Clone(e.Value)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Put implements Store: a view is read-only.
func (v *View) Put(string, []byte) error {
	return fmt.Errorf("%w: a fleet view is read-only (write with Commit)", errs.ErrInternal)
}

// Delete implements Store: a view is read-only.
func (v *View) Delete(string) error {
	return fmt.Errorf("%w: a fleet view is read-only (write with Commit)", errs.ErrInternal)
}

// Close implements Store.
func (v *View) Close() error { return nil }

// Revisions returns each bucket's revision in the view, by bucket name.
func (v *View) Revisions() map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range v.snaps {
		out[s.Bucket] = s.Revision
	}
	return out
}

// Digests returns each bucket's digest (natskv.Snapshot.Digest) in the view.
func (v *View) Digests() map[string]string {
	out := map[string]string{}
	for _, s := range v.snaps {
		out[s.Bucket] = s.Digest()
	}
	return out
}

// KeyRevision is the revision of key in the view (0: never written).
func (v *View) KeyRevision(key string) uint64 { return v.snaps[kindOf(key)].KeyRevision(key) }

func kindMayHold(kind, prefix string) bool {
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

// NewView builds a view from values by key (tests): every key at revision
// 1, each bucket (named prefix_kind) at revision rev.
func NewView(prefix string, rev uint64, values map[string][]byte) *View {
	byKind := map[string][]natskv.Entry{}
	for k, v := range values {
		byKind[kindOf(k)] = append(byKind[kindOf(k)], natskv.Entry{Key: k, Value: v, Revision: 1})
	}
	v := &View{snaps: map[string]*natskv.Snapshot{}}
	for _, kind := range natsKindNames() {
		v.snaps[kind] = natskv.NewSnapshot(prefix+"_"+kind, rev, byKind[kind])
	}
	return v
}
