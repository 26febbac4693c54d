package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// Fake is an in-memory engine.Engine for unit tests. It serves no traffic: it keeps
// the applied config, validates changes the way the engine must, and reports
// counters that tests feed through Record. Drain is modelled by Begin/End.
type Fake struct {
	mu       sync.Mutex
	cfg      *config.Config
	state    string
	models   map[string]*engine.ModelInfo // name@version
	peers    map[string]*engine.PeerStatus
	workers  map[int]*fakeWorker
	shards   map[string]*fakeShard
	inFlight int
	load     map[engine.LoadDim][]engine.LoadRow // SetLoad
	drain    time.Duration                       // of the last Stop
	drained  chan struct{}                       // closed when inFlight reaches 0 while draining
	applies  int
	stats    int // Stats calls
	schemas  []engine.Schema
	conns    map[uint64]*engine.Connection
	connSeq  uint64
	retired  map[connKey]*engine.ConnectionTotals // per transport and worker: closed connections
	runs     map[string]*fakeModel                // by key(name, version)
	adapters engine.AdapterCacheStats             // set by SetAdapterCache
	xforms   []engine.TransformStatus
	noWasm   string // set by WithoutTransforms: PutTransform is unsupported
	epoch    uint64
}

type connKey struct {
	transport string
	worker    int
}

type fakeWorker struct {
	requests uint64
	errors   map[string]uint64
	refusals map[string]uint64 // by cause
	service  []uint64
	failure  string // set by FailWorker
	pools    []engine.PoolStats
	copies   []engine.CopyStats
	streams  engine.StreamStats // RecordTokenStream, ReclaimStream
	tokens   engine.TokenStats
}

type fakeModel struct {
	requests, rows, executions uint64
	batch, queue               []uint64 // counts per bucket
	queueNs                    uint64
	tokens                     engine.ModelTokenStats
}

type fakeShard struct {
	requests  uint64
	errors    map[string]uint64
	queue     []uint64
	service   []uint64
	tokens    uint64
	ttft, itl []uint64 // ns
}

// FakeSamplesMax bounds the latency samples a Fake keeps per histogram.
const FakeSamplesMax = 1 << 16

func init() {
	engine.Register("fake", func(js []byte) (engine.Engine, error) { return NewFake(js) })
}

// NewFake creates a Fake from the full config JSON.
func NewFake(configJSON []byte) (*Fake, error) {
	var cfg config.Config
	if err := strictJSON(configJSON, &cfg); err != nil {
		return nil, fmt.Errorf("%w: config: %w", errs.ErrInvalidConfig, err)
	}
	if issues := config.Validate(&cfg); len(issues) > 0 {
		return nil, refusal(issues)
	}
	f := &Fake{cfg: &cfg, state: "created", models: map[string]*engine.ModelInfo{}, peers: map[string]*engine.PeerStatus{},
		workers: map[int]*fakeWorker{}, shards: map[string]*fakeShard{}, conns: map[uint64]*engine.Connection{}, retired: map[connKey]*engine.ConnectionTotals{}}
	f.syncModels()
	f.syncPeers()
	return f, nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("trailing data after JSON value")
	}
	return nil
}

func refusal(issues []config.Issue) error {
	parts := make([]string, len(issues))
	for i, is := range issues {
		parts[i] = is.Error()
	}
	return fmt.Errorf("%w: %s", errs.ErrInvalidConfig, strings.Join(parts, "; "))
}

func key(name, version string) string { return name + "@" + version }

func (f *Fake) syncModels() {
	f.models = map[string]*engine.ModelInfo{}
	for _, m := range f.cfg.Models {
		ids := make([]string, len(m.Adapters))
		for i, a := range m.Adapters {
			ids[i] = a.ID
		}
		f.models[key(m.Name, m.Version)] = &engine.ModelInfo{Name: m.Name, Version: m.Version, Kind: m.Kind,
			Aliases: nonNil(slices.Clone(m.Aliases)), Adapters: ids}
	}
}

func (f *Fake) syncPeers() {
	f.peers = map[string]*engine.PeerStatus{}
	for _, p := range f.cfg.Peers {
		f.peers[p.Name] = &engine.PeerStatus{Peer: p, State: "connecting"}
	}
}

func (f *Fake) live() error {
	switch f.state {
	case "running":
		return nil
	case "draining":
		return errs.ErrShuttingDown
	default:
		return fmt.Errorf("%w: engine is %s", errs.ErrNotRunning, f.state)
	}
}

// Start implements engine.Engine.
func (f *Fake) Start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != "created" {
		return fmt.Errorf("%w: engine is %s", errs.ErrBusy, f.state)
	}
	f.state = "running"
	return nil
}

// Stop implements engine.Engine: it waits for requests begun with Begin to
// End (past drain too: the Fake has no traffic of its own to refuse), and
// records drain for tests.
func (f *Fake) Stop(ctx context.Context, drain time.Duration) error {
	f.mu.Lock()
	if f.state != "running" {
		st := f.state
		f.mu.Unlock()
		return fmt.Errorf("%w: engine is %s", errs.ErrNotRunning, st)
	}
	f.state = "draining"
	f.drain = drain
	f.drained = make(chan struct{})
	if f.inFlight == 0 {
		close(f.drained)
	}
	drained := f.drained
	f.mu.Unlock()
	select {
	case <-drained:
		f.mu.Lock()
		f.state = "stopped"
		clear(f.conns) // the real engine tears its transport down
		clear(f.retired)
		f.mu.Unlock()
		return nil
	case <-ctx.Done():
		f.mu.Lock()
		f.state = "stopped"
		clear(f.conns)
		clear(f.retired)
		n := f.inFlight
		f.mu.Unlock()
		return fmt.Errorf("%w: %d requests dropped: %w", errs.ErrTimeout, n, ctx.Err())
	}
}

// LastDrain is the drain the last Stop was given.
func (f *Fake) LastDrain() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.drain
}

// Begin marks one request in flight; it fails once draining has begun, as
// the real engine answers shutting_down.
func (f *Fake) Begin() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	f.inFlight++
	return nil
}

// End finishes a request begun with Begin.
func (f *Fake) End() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inFlight == 0 {
		return
	}
	f.inFlight--
	if f.inFlight == 0 && f.drained != nil {
		close(f.drained)
		f.drained = nil
	}
}

// Applies counts successful Apply calls (tests check that reload applies
// only what changed).
func (f *Fake) Applies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies
}

// Schemas returns the schema set last applied.
func (f *Fake) Schemas() []engine.Schema {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.schemas)
}

// FailWorker makes worker i report a failure, as a worker whose loop
// panicked does (tests of the daemon's reaction).
func (f *Fake) FailWorker(i int, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[i]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}}
		f.workers[i] = w
	}
	w.failure = why
}

// StatsCalls counts Stats calls (metrics must take one snapshot a scrape).
func (f *Fake) StatsCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Config returns a copy of the config the Fake holds now.
func (f *Fake) Config() *config.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg.Clone()
}

// Apply implements engine.Engine: all changes or none.
func (f *Fake) Apply(changes ...engine.Change) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state == "draining" || f.state == "stopped" {
		return errs.ErrShuttingDown
	}
	next := f.cfg.Clone()
	schemas := f.schemas
	for _, ch := range changes {
		var err error
		switch ch.Section {
		case engine.SectionRoutes:
			next.Routes = nil
			err = strictJSON(ch.Doc, &next.Routes)
		case engine.SectionShards:
			next.Shards = nil
			err = strictJSON(ch.Doc, &next.Shards)
		case engine.SectionTenants:
			next.Tenants = nil
			err = strictJSON(ch.Doc, &next.Tenants)
		case engine.SectionModels:
			next.Models = nil
			err = strictJSON(ch.Doc, &next.Models)
		case engine.SectionPeers:
			next.Peers = nil
			err = strictJSON(ch.Doc, &next.Peers)
		case engine.SectionSchemas:
			schemas = nil
			err = strictJSON(ch.Doc, &schemas)
		default:
			return fmt.Errorf("%w: unknown section %q", errs.ErrInvalidArgument, ch.Section)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errs.ErrInvalidConfig, ch.Section, err)
		}
	}
	if issues := config.Validate(next); len(issues) > 0 {
		return refusal(issues)
	}
	f.cfg = next
	f.schemas = schemas
	f.syncModels()
	f.syncPeers()
	f.applies++
	return nil
}

// SetAlias implements engine.Engine.
func (f *Fake) SetAlias(model, alias, version string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if model == "" || alias == "" || version == "" {
		return fmt.Errorf("%w: model, alias and version are required", errs.ErrInvalidArgument)
	}
	if _, ok := f.models[key(model, alias)]; ok {
		return fmt.Errorf("%w: alias %q would hide version %q of model %s", errs.ErrInvalidConfig, alias, alias, model)
	}
	target, ok := f.models[key(model, version)]
	if !ok {
		return fmt.Errorf("%w: model %s version %s is not loaded", errs.ErrNotFound, model, version)
	}
	for i := range f.cfg.Models {
		m := &f.cfg.Models[i]
		if m.Name == model {
			m.Aliases = slices.DeleteFunc(m.Aliases, func(a string) bool { return a == alias })
			if m.Version == version {
				m.Aliases = append(m.Aliases, alias)
			}
		}
	}
	for _, mi := range f.models {
		if mi.Name == model {
			mi.Aliases = slices.DeleteFunc(mi.Aliases, func(a string) bool { return a == alias })
		}
	}
	target.Aliases = append(target.Aliases, alias)
	return nil
}

// LoadModel implements engine.Engine.
func (f *Fake) LoadModel(spec config.Model) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.models[key(spec.Name, spec.Version)]; ok {
		return fmt.Errorf("%w: model %s version %s", errs.ErrAlreadyExists, spec.Name, spec.Version)
	}
	next := f.cfg.Clone()
	next.Models = append(next.Models, spec)
	if issues := config.Validate(next); len(issues) > 0 {
		return refusal(issues)
	}
	f.cfg = next
	f.syncModels()
	return nil
}

// Models implements engine.Engine.
func (f *Fake) Models() ([]engine.ModelInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.ModelInfo, 0, len(f.models))
	for _, m := range f.models {
		c := *m
		c.Aliases = slices.Clone(m.Aliases)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i].Name, out[i].Version) < key(out[j].Name, out[j].Version) })
	return out, nil
}

// AddPeer implements engine.Engine.
func (f *Fake) AddPeer(p config.Peer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if issues := config.CheckPeer("peer", p); len(issues) > 0 {
		return refusal(issues)
	}
	if _, ok := f.peers[p.Name]; ok {
		return fmt.Errorf("%w: peer %q", errs.ErrAlreadyExists, p.Name)
	}
	f.cfg.Peers = append(f.cfg.Peers, p)
	f.peers[p.Name] = &engine.PeerStatus{Peer: p, State: "connecting"}
	return nil
}

// RemovePeer implements engine.Engine.
func (f *Fake) RemovePeer(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.peers[name]; !ok {
		return fmt.Errorf("%w: peer %q", errs.ErrNotFound, name)
	}
	delete(f.peers, name)
	f.cfg.Peers = slices.DeleteFunc(f.cfg.Peers, func(p config.Peer) bool { return p.Name == name })
	return nil
}

// Peers implements engine.Engine.
func (f *Fake) Peers() ([]engine.PeerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.PeerStatus, 0, len(f.peers))
	for _, p := range f.peers {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

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

// Stats implements engine.Engine.
func (f *Fake) Stats() (engine.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats++
	var st engine.Stats
	var all []uint64
	for i, core := range f.cfg.Engine.Workers {
		ws := engine.WorkerStats{Index: i, Core: core, Errors: engine.ErrorCounts{}, Alive: f.state == "running"}
		if w := f.workers[i]; w != nil && w.failure != "" {
			ws.Alive, ws.Panics = false, 1
		}
		if w := f.workers[i]; w != nil {
			var errN uint64
			for c, n := range w.errors {
				ws.Errors[c] = n
				errN += n
			}
			ws.Refusals = engine.ErrorCounts{}
			for c, n := range w.refusals {
				ws.Refusals[c] = n
			}
			ws.OK = w.requests - errN
			ws.RxFrames, ws.TxFrames, ws.BufferReuses = w.requests, w.requests, w.requests
			ws.Latency = summarize(w.service)
			ws.Pools, ws.Copies = w.pools, w.copies
			ws.Streams, ws.Tokens = w.streams, w.tokens
			all = append(all, w.service...)
		} else {
			ws.Latency = summarize(nil)
		}
		st.Workers = append(st.Workers, ws)
	}
	st.Latency = summarize(all)
	st.AdapterCache = f.adapters
	for _, sh := range f.cfg.Shards {
		ss := engine.ShardStats{Name: sh.Name, Local: true}
		for k, v := range sh.Labels {
			if f.cfg.Host.Labels[k] != v {
				ss.Local = false
			}
		}
		if s := f.shards[sh.Name]; s != nil {
			ss.Requests = s.requests
			for _, n := range s.errors {
				ss.Errors += n
			}
			ss.Queue, ss.Service = summarize(s.queue), summarize(s.service)
			ss.Tokens, ss.TTFT, ss.ITL = s.tokens, summarize(s.ttft), summarize(s.itl)
		} else {
			ss.Queue, ss.Service = summarize(nil), summarize(nil)
			ss.TTFT, ss.ITL = summarize(nil), summarize(nil)
		}
		st.Shards = append(st.Shards, ss)
	}
	for _, m := range f.models {
		ms := engine.ModelStats{Name: m.Name, Version: m.Version,
			BatchSize:    engine.Buckets{Bounds: BatchSizeBounds, Counts: make([]uint64, len(BatchSizeBounds)+1)},
			QueueDelayUs: engine.Buckets{Bounds: QueueDelayBoundsUs, Counts: make([]uint64, len(QueueDelayBoundsUs)+1)}}
		if r := f.runs[key(m.Name, m.Version)]; r != nil {
			ms.Requests, ms.Inferences, ms.Executions = r.requests, r.rows, r.executions
			copy(ms.BatchSize.Counts, r.batch)
			copy(ms.QueueDelayUs.Counts, r.queue)
			ms.BatchSize.Sum, ms.QueueDelayUs.Sum = r.rows, r.queueNs
			ms.Tokens = r.tokens
		}
		st.Models = append(st.Models, ms)
	}
	sort.Slice(st.Models, func(i, j int) bool {
		return key(st.Models[i].Name, st.Models[i].Version) < key(st.Models[j].Name, st.Models[j].Version)
	})
	return st, nil
}

// Status implements engine.Engine.
func (f *Fake) Status() (engine.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := engine.Status{Running: f.state == "running", Draining: f.state == "draining", Transport: f.cfg.Engine.Transport,
		Listen: f.cfg.IOUring.Listen, HugepagesNote: "fake engine: in-memory, serves no traffic",
		Schemas: len(f.schemas), Versions: map[string]string{"engine": "fake", "wire": "1"}}
	for i, core := range f.cfg.Engine.Workers {
		wi := engine.WorkerInfo{Index: i, Core: core, Alive: f.state == "running"}
		if w := f.workers[i]; w != nil && w.failure != "" {
			wi.Alive, wi.Panics, wi.Failure = false, 1, w.failure
		}
		st.Workers = append(st.Workers, wi)
	}
	for _, m := range f.models {
		st.Models = append(st.Models, *m)
	}
	sort.Slice(st.Models, func(i, j int) bool {
		return key(st.Models[i].Name, st.Models[i].Version) < key(st.Models[j].Name, st.Models[j].Version)
	})
	return st, nil
}

// Connect adds a connection as a connection-oriented transport would on
// accept, and returns its id. Only a running engine accepts.
func (f *Fake) Connect(c engine.Connection) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return 0, err
	}
	f.connSeq++
	c.ID = f.connSeq
	if c.State == "" {
		c.State = "up"
	}
	if c.Role == "" {
		c.Role = "client"
	}
	f.conns[c.ID] = &c
	f.totalsOf(c.Transport, c.Listen, c.Worker).Accepted++
	return c.ID, nil
}

// CountConnection adds traffic to a connection's counters, as its worker
// would; false if the id is unknown.
func (f *Fake) CountConnection(id, rxFrames, rxBytes, txFrames, txBytes, errors uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[id]
	if ok {
		c.RxFrames += rxFrames
		c.RxBytes += rxBytes
		c.TxFrames += txFrames
		c.TxBytes += txBytes
		c.Errors += errors
	}
	return ok
}

// Connections implements engine.Engine.
func (f *Fake) Connections() ([]engine.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.Connection, 0, len(f.conns))
	for _, c := range f.conns {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// CloseConnection implements engine.Engine. The real engine lists a closed
// connection as "closing" until its worker lets go; the Fake drops it at once.
func (f *Fake) CloseConnection(id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[id]
	if !ok {
		return fmt.Errorf("%w: no connection %d", errs.ErrNotFound, id)
	}
	t := f.totalsOf(c.Transport, c.Listen, c.Worker)
	addTraffic(t, c)
	t.Closed++
	delete(f.conns, id)
	return nil
}

func (f *Fake) totalsOf(transport, listen string, worker int) *engine.ConnectionTotals {
	k := connKey{transport, worker}
	t := f.retired[k]
	if t == nil {
		t = &engine.ConnectionTotals{Transport: transport, Listen: listen, Worker: worker}
		f.retired[k] = t
	}
	return t
}

// ConnectionTotals implements engine.Engine: closed connections' counts plus the
// open ones', per transport and worker.
func (f *Fake) ConnectionTotals() ([]engine.ConnectionTotals, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.ConnectionTotals, 0, len(f.retired))
	for k, r := range f.retired {
		t := *r
		for _, c := range f.conns {
			if c.Transport == k.transport && c.Worker == k.worker {
				addTraffic(&t, c)
				t.Open++
			}
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Transport != out[j].Transport {
			return out[i].Transport < out[j].Transport
		}
		return out[i].Worker < out[j].Worker
	})
	return out, nil
}

// addTraffic counts c's traffic into t.
func addTraffic(t *engine.ConnectionTotals, c *engine.Connection) {
	t.RxFrames += c.RxFrames
	t.RxBytes += c.RxBytes
	t.RxLarge += c.RxLarge
	t.TxFrames += c.TxFrames
	t.TxBytes += c.TxBytes
	t.TxLarge += c.TxLarge
	t.Errors += c.Errors
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var _ engine.Engine = (*Fake)(nil)

// wasmMagic starts every WebAssembly binary; the component layer follows.
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d}

// PutTransform implements engine.Engine. The fake checks only that the
// module is a component (version 0x0d, layer 1) of a registered pair; the
// real checks are the Rust engine's (dataplane/transform).
// WithoutTransforms makes the fake an engine built without the `wasm`
// feature: every PutTransform is refused as unsupported with why.
func (f *Fake) WithoutTransforms(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noWasm = why
}

func (f *Fake) PutTransform(subject string, from, to int, wasm []byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noWasm != "" {
		return 0, fmt.Errorf("%w: %s", errs.ErrUnsupported, f.noWasm)
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], wasmMagic) || wasm[6] != 1 {
		return 0, fmt.Errorf("%w: transform %s %d -> %d: not a WebAssembly component", errs.ErrInvalidArgument, subject, from, to)
	}
	reg := func(v int) bool {
		return slices.ContainsFunc(f.schemas, func(s engine.Schema) bool {
			return s.Subject == subject && s.Version == v && !s.Retired
		})
	}
	if !reg(from) || !reg(to) {
		return 0, fmt.Errorf("%w: transform %s %d -> %d: both versions must be registered schemas of the subject", errs.ErrNotFound, subject, from, to)
	}
	f.epoch++
	st := engine.TransformStatus{Subject: subject, From: from, To: to, Bytes: len(wasm),
		Digest: fmt.Sprintf("%016x", fnv1a(wasm)), LoadedUnixMs: uint64(time.Now().UnixMilli())}
	i := slices.IndexFunc(f.xforms, func(t engine.TransformStatus) bool {
		return t.Subject == subject && t.From == from && t.To == to
	})
	if i >= 0 {
		f.xforms[i] = st
	} else {
		f.xforms = append(f.xforms, st)
	}
	return f.epoch, nil
}

func fnv1a(b []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return h
}

// RemoveTransform implements engine.Engine.
func (f *Fake) RemoveTransform(subject string, from, to int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.xforms)
	f.xforms = slices.DeleteFunc(f.xforms, func(t engine.TransformStatus) bool {
		return t.Subject == subject && t.From == from && t.To == to
	})
	if len(f.xforms) == n {
		return fmt.Errorf("%w: transform %s %d -> %d", errs.ErrNotFound, subject, from, to)
	}
	f.epoch++
	return nil
}

// Transforms implements engine.Engine.
func (f *Fake) Transforms() ([]engine.TransformStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.xforms), nil
}
