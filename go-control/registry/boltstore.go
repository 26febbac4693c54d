package registry

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// BoltStore is the embedded durable Store: one bbolt file, one bucket. Each
// value is stored as an 8-byte big-endian revision followed by the bytes;
// the bucket sequence is the store-wide revision counter.
type BoltStore struct {
	db *bolt.DB
}

var boltBucket = []byte("sluice-registry")

// boltLockTimeout bounds the wait for the file lock another process holds.
const boltLockTimeout = 2 * time.Second

// BoltFileName is the file OpenBoltStore creates inside the data dir.
const BoltFileName = "registry.db"

// OpenBoltStore opens (creating if needed) dataDir/registry.db.
func OpenBoltStore(dataDir string) (*BoltStore, error) {
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("registry store: %w", err)
	}
	path := filepath.Join(dataDir, BoltFileName)
	db, err := bolt.Open(path, 0o640, &bolt.Options{Timeout: boltLockTimeout})
	if err != nil {
		return nil, fmt.Errorf("registry store %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(boltBucket)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("registry store %s: %w", path, err)
	}
	return &BoltStore{db: db}, nil
}

func decodeBolt(k, v []byte) (Entry, error) {
	if len(v) < 8 {
		return Entry{}, fmt.Errorf("registry store: corrupt entry %q (%d bytes)", k, len(v))
	}
	return Entry{Key: string(k), Revision: binary.BigEndian.Uint64(v[:8]), Value: append([]byte(nil), v[8:]...)}, nil
}

func (s *BoltStore) List(ctx context.Context, prefix string) ([]Entry, error) {
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(boltBucket).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			e, err := decodeBolt(k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (s *BoltStore) Get(ctx context.Context, key string) (Entry, error) {
	var e Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(boltBucket).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		var err error
		e, err = decodeBolt([]byte(key), v)
		return err
	})
	return e, err
}

func (s *BoltStore) Put(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	revs, err := s.PutAll(ctx, []Write{{Key: key, Value: value, Expect: expect}})
	if err != nil {
		return 0, err
	}
	return revs[0], nil
}

// PutAll writes every write in one transaction, or none.
func (s *BoltStore) PutAll(ctx context.Context, ws []Write) ([]uint64, error) {
	revs := make([]uint64, len(ws))
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		for _, w := range ws {
			var cur uint64
			if v := b.Get([]byte(w.Key)); v != nil {
				e, err := decodeBolt([]byte(w.Key), v)
				if err != nil {
					return err
				}
				cur = e.Revision
			}
			if cur != w.Expect {
				return ErrRevisionMismatch
			}
		}
		for i, w := range ws {
			rev, err := b.NextSequence()
			if err != nil {
				return err
			}
			buf := make([]byte, 8+len(w.Value))
			binary.BigEndian.PutUint64(buf, rev)
			copy(buf[8:], w.Value)
			if err := b.Put([]byte(w.Key), buf); err != nil {
				return err
			}
			revs[i] = rev
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return revs, nil
}

func (s *BoltStore) Delete(ctx context.Context, key string, expect uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(boltBucket)
		v := b.Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		e, err := decodeBolt([]byte(key), v)
		if err != nil {
			return err
		}
		if e.Revision != expect {
			return ErrRevisionMismatch
		}
		return b.Delete([]byte(key))
	})
}

func (s *BoltStore) Close() error { return s.db.Close() }
