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
	pools    []*fakePool // [[backends]], endpoints changed by BackendEndpoint
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
	fd       *engine.FrontdoorStatus // set by SetFrontdoor
	noWasm   string                  // set by WithoutTransforms: PutTransform is unsupported
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
	// Set by RestartWorker: the engine restarted the worker after a panic.
	restarts     uint64
	lastPanic    string
	crashLooping bool
	pools        []engine.PoolStats
	copies       []engine.CopyStats
	streams      engine.StreamStats // RecordTokenStream, ReclaimStream
	tokens       engine.TokenStats
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
	f.syncBackends()
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

// FailWorker makes worker i report a failure for good, as a worker does
// whose loop panicked and whose recovery failed too (tests of the daemon's
// reaction).
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

// RestartWorker makes worker i report a panic the engine recovered from:
// one more panic and restart, the panic's text, crash-looping or not.
func (f *Fake) RestartWorker(i int, why string, crashLooping bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.workers[i]
	if w == nil {
		w = &fakeWorker{errors: map[string]uint64{}}
		f.workers[i] = w
	}
	w.restarts++
	w.lastPanic, w.crashLooping = why, crashLooping
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

// Stats implements engine.Engine.
func (f *Fake) Stats() (engine.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats++
	var st engine.Stats
	var all []uint64
	for i, core := range f.cfg.Engine.Workers {
		ws := engine.WorkerStats{Index: i, Core: core, Errors: engine.ErrorCounts{}, Alive: f.state == "running"}
		if w := f.workers[i]; w != nil {
			ws.Panics, ws.Restarts, ws.CrashLooping = w.restarts, w.restarts, w.crashLooping
		}
		if w := f.workers[i]; w != nil && w.failure != "" {
			ws.Alive, ws.Panics = false, ws.Panics+1
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
		if w := f.workers[i]; w != nil {
			wi.Panics, wi.Restarts, wi.CrashLooping, wi.Failure = w.restarts, w.restarts, w.crashLooping, w.lastPanic
		}
		if w := f.workers[i]; w != nil && w.failure != "" {
			wi.Alive, wi.Panics, wi.FailedForGood, wi.Failure = false, wi.Panics+1, true, w.failure
		}
		st.Workers = append(st.Workers, wi)
	}
	for _, m := range f.models {
		st.Models = append(st.Models, *m)
	}
	sort.Slice(st.Models, func(i, j int) bool {
		return key(st.Models[i].Name, st.Models[i].Version) < key(st.Models[j].Name, st.Models[j].Version)
	})
	// What SetFrontdoor set; the configured pools' endpoints when it set
	// no backends.
	st.Frontdoor = f.frontdoor()
	if b := f.backendsStatus(); b != nil {
		if st.Frontdoor == nil {
			st.Frontdoor = &engine.FrontdoorStatus{}
		}
		if st.Frontdoor.Backends == nil {
			st.Frontdoor.Backends = b
		}
	}
	return st, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

var _ engine.Engine = (*Fake)(nil)
