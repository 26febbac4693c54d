package sluice

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Schema is a negotiation answer: what requests of that subject carry in
// SchemaID and SchemaVersion, and the schema itself.
type Schema struct {
	SchemaID uint32
	Version  uint32
	TTL      time.Duration // how long the answer may be cached
	Type     wire.SchemaType
	Text     []byte // schema text, or descriptor bytes (a copy)
}

// Negotiate asks the endpoint for the schema of subject (versionHint 0: the
// latest). Answers are cached per (subject, versionHint) for the TTL the
// server gave; a TTL of 0 is never cached. Unknown subjects fail with
// ErrUnknownSubject.
func (c *Client) Negotiate(ctx context.Context, subject string, versionHint uint32) (*Schema, error) {
	now := time.Now()
	if s := c.schemas.get(subject, versionHint, now); s != nil {
		c.stats.schemaCacheHits.Add(1)
		return s, nil
	}
	r := wire.Repr{Kind: wire.KindNegotiateRequest, RequestID: c.nextID.Add(1), TenantID: c.opts.TenantID,
		DeadlineUs: c.frameDeadline(0), Body: &wire.NegotiateRequest{Subject: subject, VersionHint: versionHint}}
	a, err := c.roundTrip(ctx, &r, wire.KindNegotiateResponse)
	if err != nil {
		return nil, err
	}
	defer c.release(a)
	body, ok := a.frame.NegotiateResponse()
	if !ok {
		return nil, fmt.Errorf("%w: negotiation answer without a schema body", ErrMalformedAnswer)
	}
	s := &Schema{SchemaID: body.SchemaID, Version: body.Version, TTL: time.Duration(body.TTLms) * time.Millisecond,
		Type: body.SchemaType, Text: append([]byte(nil), body.Schema...)}
	c.schemas.put(subject, versionHint, s, now)
	return s, nil
}

// ClearSchemaCache drops every cached negotiation, forcing renegotiation.
func (c *Client) ClearSchemaCache() { c.schemas.clear() }

type schemaKey struct {
	subject string
	hint    uint32
}

type schemaEntry struct {
	s       *Schema
	expires time.Time
}

// schemaCache holds at most max answers; when full, expired ones are
// dropped, and new ones are not cached while it stays full.
type schemaCache struct {
	mu  sync.Mutex
	max int
	m   map[schemaKey]schemaEntry
}

func (sc *schemaCache) init(max int) {
	sc.max = max
	sc.m = make(map[schemaKey]schemaEntry)
}

func (sc *schemaCache) get(subject string, hint uint32, now time.Time) *Schema {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	k := schemaKey{subject, hint}
	e, ok := sc.m[k]
	if !ok {
		return nil
	}
	if !now.Before(e.expires) {
		delete(sc.m, k)
		return nil
	}
	return e.s
}

func (sc *schemaCache) put(subject string, hint uint32, s *Schema, now time.Time) {
	if s.TTL <= 0 {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if len(sc.m) >= sc.max {
		for k, e := range sc.m {
			if !now.Before(e.expires) {
				delete(sc.m, k)
			}
		}
	}
	if len(sc.m) < sc.max {
		sc.m[schemaKey{subject, hint}] = schemaEntry{s, now.Add(s.TTL)}
	}
}

func (sc *schemaCache) clear() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	clear(sc.m)
}
