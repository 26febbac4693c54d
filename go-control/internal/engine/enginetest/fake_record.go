package enginetest

import (
	"slices"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// What tests feed the fake: finished requests, runs, tokens, refusals,
// pools and the adapter cache, as the real engine would count them.

// Record counts one finished request on a worker and a shard, as the real
// engine would; code is "" for success or a wire error code name.
func (f *Fake) Record(worker int, shard, code string, queueNs, serviceNs uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}, refusals: map[string]uint64{}}
		f.workers[worker] = w
	}
	s := f.shards[shard]
	if s == nil {
		s = &fakeShard{errors: map[string]uint64{}}
		f.shards[shard] = s
	}
	w.requests++
	s.requests++
	if code != "" {
		w.errors[code]++
		s.errors[code]++
	}
	if len(w.service) < FakeSamplesMax {
		w.service = append(w.service, queueNs+serviceNs)
	}
	if len(s.service) < FakeSamplesMax {
		s.service = append(s.service, serviceNs)
		s.queue = append(s.queue, queueNs)
	}
}

// The engine's bucket bounds (dataplane/engine/src/stats.rs), which the
// Fake reports too.
var (
	BatchSizeBounds    = []uint64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	QueueDelayBoundsUs = []uint64{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000}
)

func bucketOf(bounds []uint64, v uint64) int {
	for i, b := range bounds {
		if v <= b {
			return i
		}
	}
	return len(bounds)
}

// RecordRun counts one execution of a model version that answered requests
// of rows rows in all, each after waiting queueNs (what a batched run of
// the engine reports).
func (f *Fake) RecordRun(model, version string, rows uint64, queueNs ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[string]*fakeModel{}
	}
	k := key(model, version)
	m := f.runs[k]
	if m == nil {
		m = &fakeModel{batch: make([]uint64, len(BatchSizeBounds)+1), queue: make([]uint64, len(QueueDelayBoundsUs)+1)}
		f.runs[k] = m
	}
	m.executions++
	m.requests += uint64(len(queueNs))
	m.rows += rows
	m.batch[bucketOf(BatchSizeBounds, rows)]++
	for _, q := range queueNs {
		m.queue[bucketOf(QueueDelayBoundsUs, q/1000)]++
		m.queueNs += q
	}
}

// TokenLatencyBoundsUs are the engine's token latency bucket bounds, µs.
var TokenLatencyBoundsUs = []uint64{50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000, 250_000, 1_000_000}

// RecordTokens records a token stream of model, version: its time to first
// token and the gaps between its later tokens, µs.
func (f *Fake) RecordTokens(model, version string, ttftUs uint64, itlUs ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.runs == nil {
		f.runs = map[string]*fakeModel{}
	}
	k := key(model, version)
	m := f.runs[k]
	if m == nil {
		m = &fakeModel{batch: make([]uint64, len(BatchSizeBounds)+1), queue: make([]uint64, len(QueueDelayBoundsUs)+1)}
		f.runs[k] = m
	}
	t := &m.tokens
	if t.TTFTUs.Counts == nil {
		t.TTFTUs = engine.Buckets{Bounds: TokenLatencyBoundsUs, Counts: make([]uint64, len(TokenLatencyBoundsUs)+1)}
		t.ITLUs = engine.Buckets{Bounds: TokenLatencyBoundsUs, Counts: make([]uint64, len(TokenLatencyBoundsUs)+1)}
	}
	t.Tokens += 1 + uint64(len(itlUs))
	t.TTFTUs.Counts[bucketOf(TokenLatencyBoundsUs, ttftUs)]++
	t.TTFTUs.Sum += ttftUs
	for _, v := range itlUs {
		t.ITLUs.Counts[bucketOf(TokenLatencyBoundsUs, v)]++
		t.ITLUs.Sum += v
	}
}

// RecordTokenStream records one token stream of tenant on worker and
// shard that ran to its end (reason: eos, max_tokens, deadline,
// cancelled, ...): its time to first token and the gaps between its
// later tokens, ns (one token each). running and prefill set the worker's
// gauges.
func (f *Fake) RecordTokenStream(worker int, shard string, tenant uint32, reason string, ttftNs uint64, itlNs ...uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, s := f.workerShard(worker, shard)
	n := 1 + uint64(len(itlNs))
	w.streams.Opened++
	w.streams.Ended++
	w.tokens.Tokens += n
	w.tokens.Steps += n
	w.tokens.Frames += n
	if w.tokens.Ended == nil {
		w.tokens.Ended, w.tokens.ByTenant = engine.ErrorCounts{}, engine.TenantCounts{}
	}
	w.tokens.Ended[reason]++
	w.tokens.ByTenant[tenant] += n
	s.tokens += n
	s.ttft = append(s.ttft, ttftNs)
	s.itl = append(s.itl, itlNs...)
}

// SetTokenGauges sets a worker's running and prefill token streams.
func (f *Fake) SetTokenGauges(worker int, running, prefill uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, _ := f.workerShard(worker, "")
	w.tokens.Running, w.tokens.Prefill = running, prefill
	w.streams.Open = running
}

// ReclaimStream records an idle stream reclaimed on worker.
func (f *Fake) ReclaimStream(worker int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, _ := f.workerShard(worker, "")
	w.streams.Opened++
	w.streams.Reclaimed++
}

// workerShard returns the worker's and the shard's records (shard "" is
// none), created on first use. f.mu is held.
func (f *Fake) workerShard(worker int, shard string) (*fakeWorker, *fakeShard) {
	w := f.workers[worker]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}, refusals: map[string]uint64{}}
		f.workers[worker] = w
	}
	if shard == "" {
		return w, nil
	}
	s := f.shards[shard]
	if s == nil {
		s = &fakeShard{errors: map[string]uint64{}}
		f.shards[shard] = s
	}
	return w, s
}

// FakeBucketsNs are the histogram bounds the Fake reports.
var FakeBucketsNs = []uint64{10_000, 100_000, 1_000_000, 10_000_000, 100_000_000}

func summarize(samples []uint64) engine.Latency {
	l := engine.Latency{Count: uint64(len(samples))}
	if len(samples) == 0 {
		for _, le := range FakeBucketsNs {
			l.Buckets = append(l.Buckets, engine.Bucket{LeNs: le})
		}
		return l
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(q float64) uint64 { // nearest rank
		i := int(q*float64(len(s))+0.999999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	for _, v := range s {
		l.SumNs += v
	}
	l.P50Ns, l.P90Ns, l.P99Ns, l.P999Ns, l.MaxNs = rank(0.5), rank(0.9), rank(0.99), rank(0.999), s[len(s)-1]
	for _, le := range FakeBucketsNs {
		n, _ := slices.BinarySearch(s, le+1)
		l.Buckets = append(l.Buckets, engine.Bucket{LeNs: le, Count: uint64(n)})
	}
	return l
}

// Refuse records a refusal on a worker before routing, as the engine
// counts one: an error frame with code, and its cause (docs/wire.md,
// "What a tenant may see").
func (f *Fake) Refuse(worker int, code, cause string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}, refusals: map[string]uint64{}}
		f.workers[worker] = w
	}
	w.requests++
	w.errors[code]++
	w.refusals[cause]++
}

// SetPools makes worker report these pools and copies in its stats.
func (f *Fake) SetPools(worker int, pools []engine.PoolStats, copies []engine.CopyStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[worker]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}, refusals: map[string]uint64{}}
		f.workers[worker] = w
	}
	w.pools, w.copies = pools, copies
}

// SetAdapterCache sets the adapter cache counters Stats reports.
func (f *Fake) SetAdapterCache(s engine.AdapterCacheStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adapters = s
}
