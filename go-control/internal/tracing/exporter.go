// Package tracing turns the engine's span records into OpenTelemetry spans
// and exports them, with the daemon's own control operations, through the
// official Go SDK (batch span processor, OTLP over HTTP). The engine's
// workers only write fixed records into their rings; everything here runs
// on the control side, so a slow or failing collector never reaches the
// data path: the SDK's queue drops, and the rings drop and count.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// DrainBatch is how many records one drain call asks the engine for.
const DrainBatch = 1024

// Options configure an Exporter.
type Options struct {
	// Endpoint is the OTLP/HTTP base URL; empty: nothing is exported (the
	// rings are still drained and counted).
	Endpoint    string
	ServiceName string
	Interval    time.Duration // between drains
	// Names resolve a record's shard index and tenant id; nil: numbers only.
	Names func() (shards []string, tenants map[uint32]string)
	Log   *slog.Logger
}

// Exporter drains the engine's span records and exports them.
type Exporter struct {
	opts   Options
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	src    engine.SpanSource
	buf    []engine.SpanRecord

	drained atomic.Uint64 // records read from the engine
	stop    chan struct{}
	done    sync.WaitGroup
}

// New makes an exporter for src (nil: an engine that does not trace; only
// the daemon's own spans are exported); Start begins draining.
func New(ctx context.Context, src engine.SpanSource, opts Options) (*Exporter, error) {
	if opts.ServiceName == "" {
		opts.ServiceName = "sluiced"
	}
	if opts.Interval <= 0 {
		opts.Interval = 200 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	res := resource.NewSchemaless(attribute.String("service.name", opts.ServiceName))
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(newIDGenerator()),
		// The engine decided which requests are traced; control
		// operations are few and all traced.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	}
	if opts.Endpoint != "" {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(opts.Endpoint+"/v1/traces"))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", opts.Endpoint, err)
		}
		popts = append(popts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(opts.Interval)))
	}
	tp := sdktrace.NewTracerProvider(popts...)
	return &Exporter{
		opts:   opts,
		tp:     tp,
		tracer: tp.Tracer("github.com/sluice-ai/sluice"),
		src:    src,
		buf:    make([]engine.SpanRecord, DrainBatch),
		stop:   make(chan struct{}),
	}, nil
}

// Tracer is the tracer for the daemon's own operations.
func (x *Exporter) Tracer() trace.Tracer { return x.tracer }

// Drained is the number of span records read from the engine so far.
func (x *Exporter) Drained() uint64 { return x.drained.Load() }

// Start drains the engine every Interval until Shutdown.
func (x *Exporter) Start() {
	x.done.Add(1)
	go func() {
		defer x.done.Done()
		t := time.NewTicker(x.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-x.stop:
				x.DrainOnce()
				return
			case <-t.C:
				x.DrainOnce()
			}
		}
	}()
}

// DrainOnce reads every record waiting in the engine and turns each into
// spans; returns how many records it read.
func (x *Exporter) DrainOnce() int {
	var shards []string
	var tenants map[uint32]string
	if x.opts.Names != nil {
		shards, tenants = x.opts.Names()
	}
	total := 0
	for x.src != nil {
		n, err := x.src.Spans(x.buf)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				x.opts.Log.Debug("tracing: drain", "err", err)
			}
			return total
		}
		for i := range x.buf[:n] {
			x.emit(&x.buf[i], shards, tenants)
		}
		total += n
		x.drained.Add(uint64(n))
		if n < len(x.buf) {
			return total
		}
	}
	return total
}

// Shutdown drains once more, then flushes and stops the SDK.
func (x *Exporter) Shutdown(ctx context.Context) error {
	select {
	case <-x.stop:
	default:
		close(x.stop)
	}
	x.done.Wait()
	return x.tp.Shutdown(ctx)
}

// ForceFlush sends what the SDK holds now.
func (x *Exporter) ForceFlush(ctx context.Context) error { return x.tp.ForceFlush(ctx) }

func ts(ns uint64) time.Time { return time.Unix(0, int64(ns)) }

// emit makes one record's spans: the request's span (its ids the engine's,
// its parent the caller's span or, for a forwarded request, the
// forwarder's), and a child per stage it reached.
func (x *Exporter) emit(r *engine.SpanRecord, shards []string, tenants map[uint32]string) {
	tid := trace.TraceID(r.TraceID)
	ctx := context.Background()
	if pid := trace.SpanID(r.ParentID); pid.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: pid, TraceFlags: trace.TraceFlags(r.Flags) | trace.FlagsSampled, Remote: true,
		}))
	}
	ctx = withIDs(ctx, tid, trace.SpanID(r.SpanID))
	name := "sluice.request"
	switch r.Kind {
	case engine.SpanForward:
		name = "sluice.forward"
	case engine.SpanBackend:
		name = "sluice.backend"
	}
	attrs := []attribute.KeyValue{
		attribute.Int64("sluice.request_id", int64(r.RequestID)),
		attribute.Int("sluice.tenant_id", int(r.TenantID)),
		attribute.String("sluice.model", r.Model),
		attribute.String("sluice.model_version", r.Version),
		attribute.Int("sluice.token_count", int(r.TokenCount)),
		attribute.Int("sluice.outcome_code", int(r.Outcome)),
		attribute.Int("sluice.worker", int(r.Worker)),
	}
	if r.Adapter != "" {
		attrs = append(attrs, attribute.String("sluice.adapter", r.Adapter))
	}
	if r.Shard != 0xffff {
		shard := strconv.Itoa(int(r.Shard))
		if int(r.Shard) < len(shards) {
			shard = shards[r.Shard]
		}
		attrs = append(attrs, attribute.String("sluice.shard", shard))
	}
	if name, ok := tenants[r.TenantID]; ok {
		attrs = append(attrs, attribute.String("sluice.tenant", name))
	}
	_, span := x.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(ts(r.RecvNs)), trace.WithAttributes(attrs...))
	if r.Outcome != 0 {
		what := "error frame "
		if r.Kind == engine.SpanBackend {
			what = "HTTP status "
		}
		span.SetStatus(codes.Error, what+strconv.Itoa(int(r.Outcome)))
	}
	// Stage children: each from the end of the last stage reached.
	child := trace.ContextWithSpan(context.Background(), span)
	last := r.RecvNs
	stage := func(n string, end uint64) {
		if end == 0 || end < last {
			return
		}
		_, s := x.tracer.Start(child, n, trace.WithTimestamp(ts(last)))
		s.End(trace.WithTimestamp(ts(end)))
		last = end
	}
	if r.Kind == engine.SpanBackend {
		// The hop upstream: wait for an endpoint's place and send, the
		// backend's time to its first byte, the relay of the rest.
		stage("auth", r.AuthNs)
		stage("read_body", r.ValidateNs)
		stage("route", r.RouteNs)
		stage("queue", r.RunStartNs)
		stage("upstream", r.RunEndNs)
		stage("relay", r.SendNs)
	} else {
		stage("parse_auth", r.AuthNs)
		stage("validate", r.ValidateNs)
		stage("route", r.RouteNs)
		stage("queue", r.RunStartNs)
		stage("inference", r.RunEndNs)
		stage("send", r.SendNs)
	}
	span.End(trace.WithTimestamp(ts(r.SendNs)))
}
