package natskv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Entry is a key's latest message.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64    // stream sequence
	MsgID    string    // the message id it was written with ("" if another tool wrote it)
	ChangeID string    // the change it belongs to (change.Of(MsgID))
	Deleted  bool      // a delete marker
	Time     time.Time // when the stream stored it
}

// Snapshot is the bucket as the stream held it at Revision: every key's
// latest message. A published snapshot never changes.
type Snapshot struct {
	Bucket   string
	Revision uint64
	keys     map[string]Entry // delete markers included
}

// Get returns a live key (not deleted).
func (s *Snapshot) Get(key string) (Entry, bool) {
	e, ok := s.keys[key]
	if !ok || e.Deleted {
		return Entry{}, false
	}
	return e, true
}

// KeyRevision is the revision of key's latest message, a delete marker
// included (0: never written): the base of a compare-and-set write.
func (s *Snapshot) KeyRevision(key string) uint64 { return s.keys[key].Revision }

// List returns the live keys with prefix, sorted.
func (s *Snapshot) List(prefix string) []Entry {
	var out []Entry
	for k, e := range s.keys {
		if !e.Deleted && strings.HasPrefix(k, prefix) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Digest names the live state: a hash of every live key and its revision.
// Two appliances (or an appliance and the stream) with the same digest for
// a bucket hold the same values.
func (s *Snapshot) Digest() string { return DigestOf(s.List("")) }

// DigestOf hashes entries' keys and revisions (in the order given: List's).
func DigestOf(es []Entry) string {
	h := sha256.New()
	for _, e := range es {
		h.Write([]byte(e.Key))
		h.Write([]byte{0})
		h.Write([]byte(strconv.FormatUint(e.Revision, 10)))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Health is what a bucket's mirror knows of itself and of the stream.
type Health struct {
	Bucket string `json:"bucket"`
	// StoreRevision is the stream's last sequence as its leader last told
	// (at least: a write heard since may be newer).
	StoreRevision uint64 `json:"store_revision"`
	// StoreCheckedMsAgo: age of that answer; -1 when none came yet.
	StoreCheckedMsAgo int64  `json:"store_checked_ms_ago"`
	MirrorRevision    uint64 `json:"mirror_revision"` // the published snapshot's
	Digest            string `json:"digest"`
	WatchUp           bool   `json:"watch_up"`       // a consumer delivers
	WatchRestarts     uint64 `json:"watch_restarts"` // re-created after falling behind or failing
	CheckFailures     uint64 `json:"check_failures"` // leader reads that failed
	LastError         string `json:"last_error,omitempty"`
	// InSync: the mirror holds everything the leader had at its last
	// answer, and that answer is recent (three check intervals).
	InSync bool `json:"in_sync"`
}

// mirror keeps the bucket in memory: a consumer delivers each write as
// the stream stores it, and every check interval the stream leader is
// asked for anything after the mirror's revision. What the leader has and
// the consumer did not deliver is taken from the leader at once; a
// consumer that stays behind for two intervals is re-created (on whatever
// node now hosts it). The mirror's health is therefore measured against
// the stream, never against the mirror itself.
type mirror struct {
	b *Bucket

	mu       sync.Mutex
	work     map[string]Entry
	rev      uint64 // highest sequence taken in
	stable   *Snapshot
	synced   chan struct{} // closed at the first published snapshot
	pubCh    chan struct{} // closed (and replaced) at every publish
	onChange func()
	started  time.Time
	runCtx   context.Context // Start's: the watch lives as long as it

	storeRev    uint64
	storeAt     time.Time
	consumerRev uint64 // highest sequence the consumer delivered
	lagSince    time.Time
	consumer    jetstream.ConsumeContext
	watchUp     bool
	restarting  bool
	restarts    uint64
	checkFails  uint64
	lastErr     atomic.Pointer[string] // set from nats.go's callbacks: never under mu
}

func (m *mirror) init(b *Bucket) {
	m.b = b
	m.work = map[string]Entry{}
	m.synced = make(chan struct{})
	m.pubCh = make(chan struct{})
}

// Start fills the mirror and keeps it in step until ctx ends; it returns
// once the mirror holds the stream's state as of now (or fails after two
// op timeouts). onChange runs after each new snapshot is published; it
// only signals (the caller reads Snapshot).
func (b *Bucket) Start(ctx context.Context, onChange func()) error {
	m := &b.mirror
	m.mu.Lock()
	if !m.started.IsZero() {
		m.mu.Unlock()
		return fmt.Errorf("%w: bucket %s: mirror already started", errs.ErrInternal, b.o.Bucket)
	}
	m.started, m.onChange, m.runCtx = time.Now(), onChange, ctx
	m.mu.Unlock()

	sctx, cancel := context.WithTimeout(ctx, 2*b.o.OpTimeout)
	defer cancel()
	if last, err := b.lastSeq(sctx); err == nil && last == 0 {
		m.mu.Lock()
		m.storeRev, m.storeAt = 0, time.Now()
		m.publishLocked()
		m.mu.Unlock()
	}
	m.mu.Lock()
	m.restarting = true
	m.mu.Unlock()
	go m.startConsumer(ctx, 0)
	go m.loop(ctx)
	select {
	case <-m.synced:
		return nil
	case <-sctx.Done():
		return fmt.Errorf("%w: bucket %s: its state did not arrive within %v (%s)", errs.ErrUnavailable, b.o.Bucket,
			2*b.o.OpTimeout, m.health().LastError)
	}
}

// Snapshot returns the latest published snapshot; nil before Start synced.
func (b *Bucket) Snapshot() *Snapshot {
	b.mirror.mu.Lock()
	defer b.mirror.mu.Unlock()
	return b.mirror.stable
}

// Health describes the mirror against the stream.
func (b *Bucket) Health() Health { return b.mirror.health() }

func (b *Bucket) lastSeq(ctx context.Context) (uint64, error) {
	for {
		s, err := b.js.Stream(ctx, b.stream)
		if err == nil {
			return s.CachedInfo().State.LastSeq, nil
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (m *mirror) health() Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := Health{Bucket: m.b.o.Bucket, StoreRevision: max(m.storeRev, m.rev), StoreCheckedMsAgo: -1,
		WatchUp: m.watchUp, WatchRestarts: m.restarts, CheckFailures: m.checkFails}
	if e := m.lastErr.Load(); e != nil {
		h.LastError = *e
	}
	if m.stable != nil {
		h.MirrorRevision, h.Digest = m.stable.Revision, m.stable.Digest()
	}
	if !m.storeAt.IsZero() {
		age := time.Since(m.storeAt)
		h.StoreCheckedMsAgo = age.Milliseconds()
		h.InSync = m.stable != nil && m.stable.Revision >= m.storeRev && age < 3*m.b.o.CheckInterval+m.b.o.OpTimeout/4
	}
	return h
}

// take records one message; atEnd says its source knows of nothing after
// it, so the state at the mirror's revision is whole and can be published.
func (m *mirror) take(e Entry, atEnd, fromConsumer bool) {
	m.mu.Lock()
	if fromConsumer && e.Revision > m.consumerRev {
		m.consumerRev = e.Revision
	}
	if e.Revision > m.rev {
		m.work[e.Key] = e
		m.rev = e.Revision
	}
	pub := atEnd && e.Revision >= m.rev && m.publishLocked()
	m.mu.Unlock()
	if pub && m.onChange != nil {
		m.onChange()
	}
}

// publishLocked publishes the working state if it is newer. Callers hold
// m.mu and only call it when the state is whole.
func (m *mirror) publishLocked() bool {
	if m.stable != nil && m.stable.Revision >= m.rev {
		return false
	}
	first := m.stable == nil
	m.stable = &Snapshot{Bucket: m.b.o.Bucket, Revision: m.rev, keys: maps.Clone(m.work)}
	if first {
		close(m.synced)
	}
	close(m.pubCh)
	m.pubCh = make(chan struct{})
	return true
}

// startConsumer (re)creates the watch, from the mirror's revision on (from
// the last value of every key when the mirror is empty). It runs on its
// own goroutine when called by the check: creating a consumer needs the
// meta leader, which may be the node that just died, while the check goes
// on reading from the stream leader.
func (m *mirror) startConsumer(ctx context.Context, from uint64) {
	b := m.b
	// A consumer that cannot be re-created at once gives up (the check
	// makes a new one) rather than retrying for ever under its lock.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.prefix + ">"}, InactiveThreshold: 10 * time.Second,
		MaxResetAttempts: 2}
	if from == 0 {
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	} else {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cctx, cancel := context.WithTimeout(ctx, b.o.OpTimeout)
	defer cancel()
	cc, err := func() (jetstream.ConsumeContext, error) {
		cons, err := b.js.OrderedConsumer(cctx, b.stream, cfg)
		if err != nil {
			return nil, err
		}
		return cons.Consume(m.handle,
			jetstream.PullExpiry(2*time.Second), jetstream.PullHeartbeat(500*time.Millisecond),
			// nats.go calls this holding its consumer's lock: it must not
			// wait for ours.
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { m.setErr("watch: " + err.Error()) }))
	}()
	if err != nil {
		m.setErr("watch: " + err.Error())
	}
	m.mu.Lock()
	m.restarting = false
	var old jetstream.ConsumeContext
	switch {
	case err != nil:
		m.watchUp = false
	case ctx.Err() != nil:
		old = cc
	default:
		old = m.consumer
		m.consumer, m.watchUp = cc, true
		// It answers for what comes after where it starts.
		if from > 0 {
			m.consumerRev = max(m.consumerRev, from-1)
		}
		m.lagSince = time.Time{}
	}
	m.mu.Unlock()
	stopConsumer(old)
}

func (m *mirror) setErr(s string) { m.lastErr.Store(&s) }

// stopConsumer stops a watch without waiting: nats.go's ordered consumer
// holds its lock while it re-creates itself with backoff (seconds, when
// the meta leader is gone), and its Stop takes that lock.
func stopConsumer(cc jetstream.ConsumeContext) {
	if cc != nil {
		go cc.Stop()
	}
}

func (m *mirror) handle(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	e := m.b.entryOf(msg.Subject(), msg.Headers(), msg.Data(), md.Sequence.Stream, md.Timestamp)
	m.take(e, md.NumPending == 0, true)
}

func (m *mirror) loop(ctx context.Context) {
	tick := time.NewTicker(m.b.o.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			cc := m.consumer
			m.consumer, m.watchUp = nil, false
			m.mu.Unlock()
			stopConsumer(cc)
			return
		case <-tick.C:
			m.check(ctx)
		}
	}
}

// check reads from the stream leader whatever follows the mirror's
// revision, then judges the consumer against what the leader has.
func (m *mirror) check(ctx context.Context) {
	b := m.b
	m.mu.Lock()
	from, synced := m.rev+1, m.stable != nil
	consumerFresh := (m.watchUp || m.restarting) && time.Since(m.started) < b.o.OpTimeout
	m.mu.Unlock()
	if !synced && consumerFresh {
		return // the first delivery is under way
	}
	timeout := min(max(2*b.o.CheckInterval, 250*time.Millisecond), b.o.OpTimeout)
	for range catchUpReadsMax {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		e, err := b.leaderNext(rctx, from)
		cancel()
		if errors.Is(err, errs.ErrNotFound) {
			m.caughtUp(from - 1)
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				m.mu.Lock()
				m.checkFails++
				m.mu.Unlock()
				m.setErr("check: " + err.Error())
				m.fromReplicas(ctx, from, timeout)
			}
			return
		}
		m.take(e, false, false)
		from = e.Revision + 1
	}
}

// fromReplicas takes from any replica what follows from when the leader
// cannot be read. Replicas hold only committed messages, so the mirror
// only moves forward; but two reads may reach two replicas at different
// points, and a message one of them already removed (superseded, past the
// history limit) could be skipped. So the state is published only when the
// messages read came without a gap in their sequences, and what the
// leader last reported is left alone: in_sync stays false until the leader
// answers again.
func (m *mirror) fromReplicas(ctx context.Context, from uint64, timeout time.Duration) {
	gapless := true
	for range catchUpReadsMax {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		e, err := m.b.directNext(rctx, from)
		cancel()
		if errors.Is(err, errs.ErrNotFound) {
			m.mu.Lock()
			pub := gapless && m.rev == from-1 && m.publishLocked()
			m.mu.Unlock()
			if pub && m.onChange != nil {
				m.onChange()
			}
			return
		}
		if err != nil {
			return
		}
		gapless = gapless && e.Revision == from
		m.take(e, false, false)
		from = e.Revision + 1
	}
}

// caughtUp: the leader has nothing after upTo.
func (m *mirror) caughtUp(upTo uint64) {
	m.mu.Lock()
	m.storeRev, m.storeAt = max(upTo, m.rev), time.Now()
	pub := m.rev == upTo && m.publishLocked()
	restart := false
	switch {
	case m.restarting, m.runCtx == nil:
	case !m.watchUp:
		restart = true
	case m.consumerRev < m.storeRev:
		if m.lagSince.IsZero() {
			m.lagSince = time.Now()
		} else if time.Since(m.lagSince) >= 2*m.b.o.CheckInterval {
			restart = true
		}
	default:
		m.lagSince = time.Time{}
	}
	from, ctx := m.rev+1, m.runCtx
	if restart {
		m.restarting, m.lagSince = true, time.Time{}
		m.restarts++
	}
	m.mu.Unlock()
	if pub && m.onChange != nil {
		m.onChange()
	}
	if restart {
		go m.startConsumer(ctx, from)
	}
}

// Keys lists a snapshot's live keys (for status and tests).
func (s *Snapshot) Keys() []string {
	var out []string
	for k, e := range s.keys {
		if !e.Deleted {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Sync brings the mirror up to what the stream leader has now (a writer
// that lost a compare-and-set calls it so that its retry starts from the
// winner's write) and publishes it.
func (b *Bucket) Sync(ctx context.Context) error {
	m := &b.mirror
	for {
		m.mu.Lock()
		from := m.rev + 1
		m.mu.Unlock()
		e, err := b.leaderNext(ctx, from)
		if errors.Is(err, errs.ErrNotFound) {
			m.caughtUp(from - 1)
			return nil
		}
		if err != nil {
			return err
		}
		m.take(e, false, false)
	}
}

// WaitMirror returns once the mirror's snapshot is at rev or later (a
// writer reads its own write from then on), reading from the leader when
// the watch has not brought it within a check interval. False: ctx ended.
func (b *Bucket) WaitMirror(ctx context.Context, rev uint64) bool {
	m := &b.mirror
	nudge := time.NewTimer(b.o.CheckInterval)
	defer nudge.Stop()
	for {
		m.mu.Lock()
		ok, ch := m.stable != nil && m.stable.Revision >= rev, m.pubCh
		m.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		case <-nudge.C:
			_ = b.Sync(ctx) // a failure leaves the next nudge to try again
			nudge.Reset(b.o.CheckInterval)
		}
	}
}

// NewSnapshot builds a snapshot from entries (tests, and tools that read a
// bucket some other way).
func NewSnapshot(bucket string, revision uint64, entries []Entry) *Snapshot {
	s := &Snapshot{Bucket: bucket, Revision: revision, keys: map[string]Entry{}}
	for _, e := range entries {
		s.keys[e.Key] = e
	}
	return s
}
