package daemon

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/tracing"
)

// TracingShutdownMax bounds the final flush of spans at shutdown.
const TracingShutdownMax = 2 * time.Second

// startTracing starts exporting the daemon's control operations and, when
// the engine traces (engine.SpanSource), its span records, if [tracing]
// names an endpoint. Returns nil otherwise.
func (d *Daemon) startTracing(ctx context.Context) (*tracing.Exporter, error) {
	cfg := d.state.snapshot().Tracing
	if cfg.Endpoint == "" {
		return nil, nil
	}
	src, _ := d.eng.(engine.SpanSource)
	x, err := tracing.New(ctx, src, tracing.Options{
		Endpoint:    cfg.Endpoint,
		ServiceName: cfg.ServiceName,
		Interval:    time.Duration(cfg.ExportIntervalMs) * time.Millisecond,
		Names:       d.traceNames,
		Log:         d.state.log,
	})
	if err != nil {
		return nil, err
	}
	x.Start()
	d.state.log.Info("tracing: exporting spans", "endpoint", cfg.Endpoint, "sample_ratio", cfg.SampleRatio)
	return x, nil
}

// traceNames resolves shard indexes and tenant ids of span records, from
// the effective config (the engine's tables are built from it, in order).
func (d *Daemon) traceNames() ([]string, map[uint32]string) {
	c := d.state.snapshot()
	shards := make([]string, len(c.Shards))
	for i, s := range c.Shards {
		shards[i] = s.Name
	}
	tenants := make(map[uint32]string, len(c.Tenants))
	for _, t := range c.Tenants {
		tenants[uint32(t.ID)] = t.Name
	}
	return shards, tenants
}

// controlSpans makes every admin request that may change something (not
// GET or HEAD) a span, child of the caller's W3C traceparent when it
// sends one; audit adds what the change was and how it ended.
func (d *Daemon) controlSpans(h http.Handler) http.Handler {
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.tracer == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := d.tracer.Start(ctx, "sluice.control "+r.Method+" "+r.URL.Path,
			trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", rec.status))
		if rec.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(rec.status))
		}
	})
}

// traceChange records one audited control change on the request's span,
// or as a span of its own when it did not come through the API (SIGHUP,
// the fleet).
func (d *Daemon) traceChange(ctx context.Context, who, kind, action, what, outcome string, err error) {
	if d.tracer == nil {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("sluice.change.who", who), attribute.String("sluice.change.kind", kind),
		attribute.String("sluice.change.action", action), attribute.String("sluice.change.what", what),
		attribute.String("sluice.change.outcome", outcome),
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		_, span = d.tracer.Start(ctx, "sluice.control "+kind+" "+action)
		defer span.End()
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
}
