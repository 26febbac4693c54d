package tracing

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// givenIDKey carries the ids the engine chose for a request's span into
// the SDK's span start, which otherwise makes its own.
type givenIDKey struct{}

type givenIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// withIDs makes the next span started from ctx take these ids.
func withIDs(ctx context.Context, t trace.TraceID, s trace.SpanID) context.Context {
	return context.WithValue(ctx, givenIDKey{}, givenIDs{t, s})
}

// idGenerator gives a span the ids in its context when there are some (an
// engine record) and random ones otherwise (its stage children, control
// operations).
type idGenerator struct {
	mu  sync.Mutex
	rng *mrand.ChaCha8
}

func newIDGenerator() *idGenerator {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	return &idGenerator{rng: mrand.NewChaCha8(seed)}
}

func (g *idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if v, ok := ctx.Value(givenIDKey{}).(givenIDs); ok {
		return v.trace, v.span
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var t trace.TraceID
	for !t.IsValid() {
		binary.BigEndian.PutUint64(t[:8], g.rng.Uint64())
		binary.BigEndian.PutUint64(t[8:], g.rng.Uint64())
	}
	return t, g.spanLocked()
}

func (g *idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if v, ok := ctx.Value(givenIDKey{}).(givenIDs); ok {
		return v.span
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.spanLocked()
}

func (g *idGenerator) spanLocked() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.BigEndian.PutUint64(s[:], g.rng.Uint64())
	}
	return s
}
