package registry

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
)

// Store is the registry's durable state: a key-value map where every write
// is a compare-and-set on the key's revision, as in NATS JetStream KV
// (Create = Put with expect 0, Update = Put with the last revision, Delete
// with the last revision). Keys use only [A-Za-z0-9/_-] so that a JetStream
// KV bucket can hold them unchanged.
type Store interface {
	// List returns every entry whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Entry, error)
	// Get returns the entry under key, or ErrNotFound.
	Get(ctx context.Context, key string) (Entry, error)
	// Put stores value under key if the key's current revision is expect
	// (0: the key must not exist) and returns the new revision; otherwise
	// it fails with ErrRevisionMismatch and changes nothing.
	Put(ctx context.Context, key string, value []byte, expect uint64) (uint64, error)
	// PutAll stores every write or none: each is a compare-and-set as in
	// Put, and one mismatch refuses them all (ErrRevisionMismatch). It
	// returns the new revisions in order. A registration allocates its id
	// and records its version in one PutAll, so a registration that fails
	// consumes no id.
	PutAll(ctx context.Context, ws []Write) ([]uint64, error)
	// Delete removes key if its current revision is expect; ErrNotFound if
	// it does not exist, ErrRevisionMismatch if the revision differs.
	Delete(ctx context.Context, key string, expect uint64) error
	Close() error
}

// Write is one compare-and-set of a PutAll.
type Write struct {
	Key    string
	Value  []byte
	Expect uint64
}

// Entry is one stored value with the revision of its last write.
// Revisions are positive and grow with every write to the store.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

var (
	ErrNotFound         = errors.New("store: key not found")
	ErrRevisionMismatch = errors.New("store: revision mismatch")
	ErrClosed           = errors.New("store: closed")
	// ErrUnavailable: a shared store could not take the write; nothing was
	// written and retrying can succeed.
	ErrUnavailable = errors.New("store: unavailable, not written")
	// ErrOutcomeUnknown: a shared store was sent the write and did not
	// answer in time; it may still be applied.
	ErrOutcomeUnknown = errors.New("store: outcome unknown")
)

// MemoryStore keeps everything in memory; for tests and throwaway servers.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[string]Entry
	rev     uint64
	closed  bool
}

func NewMemoryStore() *MemoryStore {
	return &MemoryStore{entries: map[string]Entry{}}
}

func (m *MemoryStore) List(_ context.Context, prefix string) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	var out []Entry
	for k, e := range m.entries {
		if strings.HasPrefix(k, prefix) {
			out = append(out, cloneEntry(e))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *MemoryStore) Get(_ context.Context, key string) (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Entry{}, ErrClosed
	}
	e, ok := m.entries[key]
	if !ok {
		return Entry{}, ErrNotFound
	}
	return cloneEntry(e), nil
}

func (m *MemoryStore) Put(_ context.Context, key string, value []byte, expect uint64) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	if m.entries[key].Revision != expect {
		return 0, ErrRevisionMismatch
	}
	m.rev++
	m.entries[key] = Entry{Key: key, Value: append([]byte(nil), value...), Revision: m.rev}
	return m.rev, nil
}

func (m *MemoryStore) PutAll(_ context.Context, ws []Write) ([]uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	for _, w := range ws {
		if m.entries[w.Key].Revision != w.Expect {
			return nil, ErrRevisionMismatch
		}
	}
	revs := make([]uint64, len(ws))
	for i, w := range ws {
		m.rev++
		m.entries[w.Key] = Entry{Key: w.Key, Value: append([]byte(nil), w.Value...), Revision: m.rev}
		revs[i] = m.rev
	}
	return revs, nil
}

func (m *MemoryStore) Delete(_ context.Context, key string, expect uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	e, ok := m.entries[key]
	if !ok {
		return ErrNotFound
	}
	if e.Revision != expect {
		return ErrRevisionMismatch
	}
	delete(m.entries, key)
	return nil
}

func (m *MemoryStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func cloneEntry(e Entry) Entry {
	e.Value = append([]byte(nil), e.Value...)
	return e
}
