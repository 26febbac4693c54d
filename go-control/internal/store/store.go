// Package store keeps the control state made through the admin API (peers,
// model aliases, loaded models, route and tenant overrides) so that it
// survives a restart. Store is a flat key-value interface so that a NATS
// JetStream KV bucket can implement it for a fleet; Bolt is the embedded one.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Store is a flat key-value store. Keys use only [A-Za-z0-9_=.-] so that a
// NATS KV bucket takes them as they are. Get of a missing key returns an
// error wrapping errs.ErrNotFound.
type Store interface {
	Get(key string) ([]byte, error)
	Put(key string, value []byte) error
	Delete(key string) error
	// List returns every key starting with prefix, sorted, with its value.
	List(prefix string) ([]Entry, error)
	Close() error
}

// Entry is one key and value.
type Entry struct {
	Key   string
	Value []byte
}

// ValueSizeMax bounds one stored value, in bytes (NATS KV's default max
// message size is 1 MiB).
const ValueSizeMax = 1 << 20

// OpenTimeout bounds the wait for another process holding the file lock.
const OpenTimeout = 2 * time.Second

const fileName = "control.db"

var bucket = []byte("control")

// Bolt is the embedded store: one bbolt file in the data dir.
type Bolt struct {
	db *bolt.DB
}

// OpenBolt opens or creates dataDir/control.db. The directory is created
// 0700: the file may hold tenant keys.
func OpenBolt(dataDir string) (*Bolt, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: data dir: %w", errs.ErrIO, err)
	}
	path := filepath.Join(dataDir, fileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s is locked by another process", errs.ErrBusy, path)
		}
		return nil, fmt.Errorf("%w: open %s: %w", errs.ErrIO, path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("%w: %s: %w", errs.ErrIO, path, err)
	}
	return &Bolt{db: db}, nil
}

// CheckKey reports whether key is usable in every store implementation.
func CheckKey(key string) error {
	if key == "" || len(key) > 255 {
		return fmt.Errorf("%w: store key must be 1..=255 bytes", errs.ErrInvalidArgument)
	}
	for _, c := range key {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_=.-", c)
		if !ok {
			return fmt.Errorf("%w: store key %q has %q", errs.ErrInvalidArgument, key, c)
		}
	}
	return nil
}

// Get implements Store.
func (b *Bolt) Get(key string) ([]byte, error) {
	var out []byte
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("%w: key %q", errs.ErrNotFound, key)
		}
		out = append([]byte(nil), v...) // bolt memory is valid only inside the tx
		return nil
	})
	return out, err
}

// Put implements Store.
func (b *Bolt) Put(key string, value []byte) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if len(value) > ValueSizeMax {
		return fmt.Errorf("%w: value of %d bytes is over %d", errs.ErrInvalidArgument, len(value), ValueSizeMax)
	}
	return b.wrap(b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(key), value)
	}))
}

// Delete implements Store; deleting a missing key is not an error.
func (b *Bolt) Delete(key string) error {
	return b.wrap(b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(key))
	}))
}

// List implements Store.
func (b *Bolt) List(prefix string) ([]Entry, error) {
	var out []Entry
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && strings.HasPrefix(string(k), prefix); k, v = c.Next() {
			out = append(out, Entry{Key: string(k), Value: append([]byte(nil), v...)})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, b.wrap(err)
}

// Close implements Store.
func (b *Bolt) Close() error { return b.wrap(b.db.Close()) }

func (b *Bolt) wrap(err error) error {
	if err == nil || errors.Is(err, errs.ErrInvalidArgument) || errors.Is(err, errs.ErrNotFound) {
		return err
	}
	return fmt.Errorf("%w: store: %w", errs.ErrIO, err)
}

var _ Store = (*Bolt)(nil)
