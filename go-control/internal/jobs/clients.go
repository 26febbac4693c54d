package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// clients holds one Go client (one UDP socket to the data plane) per
// tenant: a client signs with one tenant's key. A tenant whose key changed
// gets a new client; the old one is closed once its requests are done.
type clients struct {
	addr        string
	outstanding int
	timeout     time.Duration

	mu     sync.Mutex
	byID   map[int64]*tenantClient
	closed bool
}

type tenantClient struct {
	key string // as configured ("hex:..." or "env:VAR")
	c   *sluice.Client
}

func newClients(addr string, cfg config.Jobs) *clients {
	return &clients{addr: addr, outstanding: cfg.Concurrency + 16, timeout: time.Duration(cfg.RequestTimeoutMs) * time.Millisecond,
		byID: map[int64]*tenantClient{}}
}

// get returns the client of tenant t as configured now.
func (cs *clients) get(t config.Tenant) (*sluice.Client, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return nil, sluice.ErrClosed
	}
	if tc, ok := cs.byID[t.ID]; ok && tc.key == t.Key {
		return tc.c, nil
	}
	key, err := config.DecodeKey(t.Key, getenv)
	if err != nil {
		return nil, fmt.Errorf("tenant %q key: %w", t.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := sluice.Dial(ctx, cs.addr, sluice.Options{
		TenantID: uint32(t.ID), Key: key, Timeout: cs.timeout, OutstandingMax: cs.outstanding,
	})
	if err != nil {
		return nil, fmt.Errorf("data plane %s: %w", cs.addr, err)
	}
	if old, ok := cs.byID[t.ID]; ok {
		// Requests in flight on it end within the request timeout.
		time.AfterFunc(2*cs.timeout, func() { old.c.Close() })
	}
	cs.byID[t.ID] = &tenantClient{key: t.Key, c: c}
	return c, nil
}

func (cs *clients) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for _, tc := range cs.byID {
		tc.c.Close()
	}
	cs.byID = nil
}
