// Package rustengine is the real data-plane engine: the Rust engine linked
// as a static library through the C ABI of ffi/sluice-ffi. Importing it
// registers the "rust" engine with package engine.
package rustengine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// ABIVersion is the C ABI this package was written against.
const ABIVersion = 1

func init() {
	engine.Register("rust", Open)
}

// Engine is the Rust engine behind the C ABI. Safe for concurrent use: the
// Rust side serializes control calls and never blocks its data path on them.
type Engine struct {
	// mu guards h against use after Close: every C call holds it for
	// reading until the call returns, Close takes it for writing, so a
	// call racing a shutdown (a metrics scrape, the fleet's load publisher)
	// gets ErrNotRunning instead of a freed handle.
	mu sync.RWMutex
	h  handle
}

var _ engine.Engine = (*Engine)(nil)

func toErr(rc int32, msg string) error {
	if rc == 0 {
		return nil
	}
	return errs.FromStatus(errs.Status(rc), msg)
}

// Open creates an engine from the full config as JSON; it does not start it.
func Open(configJSON []byte) (engine.Engine, error) {
	if v := abiVersion(); v != ABIVersion {
		return nil, fmt.Errorf("%w: engine library speaks ABI %d, this daemon %d", errs.ErrUnsupported, v, ABIVersion)
	}
	configJSON, err := dropNulls(configJSON)
	if err != nil {
		return nil, fmt.Errorf("%w: config: %w", errs.ErrInvalidArgument, err)
	}
	h, rc, msg := cOpen(configJSON)
	if err := toErr(rc, msg); err != nil {
		return nil, err
	}
	return &Engine{h: h}, nil
}

// OpenFile creates an engine from a TOML config file.
func OpenFile(path string) (*Engine, error) {
	h, rc, msg := cOpenFile(path)
	if err := toErr(rc, msg); err != nil {
		return nil, err
	}
	return &Engine{h: h}, nil
}

func (e *Engine) acquire() (handle, func(), error) {
	e.mu.RLock()
	if e.h == nil {
		e.mu.RUnlock()
		return nil, nil, fmt.Errorf("%w: engine closed", errs.ErrNotRunning)
	}
	return e.h, e.mu.RUnlock, nil
}

// Close frees the engine (stopping it first if it runs).
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h != nil {
		cFree(e.h)
		e.h = nil
	}
}

// Start pins the workers and begins serving.
func (e *Engine) Start() error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	return toErr(cStart(h))
}

// Stop answers late requests with shutting_down for drain (at most half of
// what ctx leaves, so the stop itself fits), then stops the workers; every
// frame received is answered.
func (e *Engine) Stop(ctx context.Context, drainFor time.Duration) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	drain := uint64(max(drainFor.Milliseconds(), 0))
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d).Milliseconds() / 2; left < int64(drain) {
			drain = uint64(max(left, 0))
		}
	}
	done := make(chan error, 1)
	// The stop may outlive ctx: it keeps the handle until it returns, so
	// Close waits for it instead of freeing the engine under it.
	go func() {
		defer release()
		done <- toErr(cStop(h, drain))
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: engine stop: %w", errs.ErrTimeout, ctx.Err())
	}
}

// Apply replaces the given sections atomically.
func (e *Engine) Apply(changes ...engine.Change) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	doc := make(map[string]json.RawMessage, len(changes))
	for _, c := range changes {
		doc[string(c.Section)] = json.RawMessage(c.Doc)
	}
	b, err := json.Marshal(doc)
	if err == nil {
		b, err = dropNulls(b)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrInvalidArgument, err)
	}
	return toErr(cApply(h, b))
}

// SetAlias points an alias at a loaded version.
func (e *Engine) SetAlias(model, alias, version string) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	return toErr(cSetAlias(h, model, alias, version))
}

// LoadModel loads one more model version.
func (e *Engine) LoadModel(spec config.Model) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	b, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrInvalidArgument, err)
	}
	return toErr(cLoadModel(h, b))
}

func (e *Engine) query(what int32, into any) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	b, rc, msg := cQuery(h, what)
	if err := toErr(rc, msg); err != nil {
		return err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("%w: decode engine answer: %w", errs.ErrInternal, err)
	}
	return nil
}

// Models lists loaded model versions.
func (e *Engine) Models() ([]engine.ModelInfo, error) {
	var m []engine.ModelInfo
	return m, e.query(queryModels, &m)
}

// AddPeer adds a forwarding peer.
func (e *Engine) AddPeer(p config.Peer) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrInvalidArgument, err)
	}
	return toErr(cAddPeer(h, b))
}

// RemovePeer removes a peer.
func (e *Engine) RemovePeer(name string) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	return toErr(cRemovePeer(h, name))
}

// BackendEndpoint adds, drains, undrains or removes a pool's endpoint.
func (e *Engine) BackendEndpoint(op engine.EndpointOp) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	b, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("%w: %w", errs.ErrInvalidArgument, err)
	}
	return toErr(cBackendEndpoint(h, b))
}

// Peers lists the peers.
func (e *Engine) Peers() ([]engine.PeerStatus, error) {
	var p []engine.PeerStatus
	return p, e.query(queryPeers, &p)
}

// Stats reads one snapshot in one call.
func (e *Engine) Stats() (engine.Stats, error) {
	var s engine.Stats
	return s, e.query(queryStats, &s)
}

// Status describes the running engine.
func (e *Engine) Status() (engine.Status, error) {
	var s engine.Status
	return s, e.query(queryStatus, &s)
}

// Connections lists the RDMA and TCP connections with counters (empty on
// DPDK and UDP-only io_uring).
func (e *Engine) Connections() ([]engine.Connection, error) {
	c := []engine.Connection{}
	return c, e.query(queryConns, &c)
}

// ConnectionTotals returns per-worker connection counters since Start.
func (e *Engine) ConnectionTotals() ([]engine.ConnectionTotals, error) {
	t := []engine.ConnectionTotals{}
	return t, e.query(queryTotals, &t)
}

// Spans drains span records of traced requests (engine.SpanSource), in
// calls of at most spansBatchMax records.
func (e *Engine) Spans(out []engine.SpanRecord) (int, error) {
	h, release, err := e.acquire()
	if err != nil {
		return 0, err
	}
	defer release()
	n, rc, msg := cSpans(h, out)
	return n, toErr(rc, msg)
}

// Load reads the token load of seconds from..to (engine.LoadSource) in
// one batched call, merged over the workers.
func (e *Engine) Load(from, to uint64, by engine.LoadDim) ([]engine.LoadRow, error) {
	h, release, err := e.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	if to < from || to-from >= uint64(loadSecondsMax) {
		return nil, fmt.Errorf("%w: load range %d..%d: at most %d seconds", errs.ErrInvalidArgument, from, to, loadSecondsMax)
	}
	// A guess that fits most reads at once: every second, a few keys.
	rows, rc, msg := cLoad(h, from, to, uint32(by), int(to-from+1)*4)
	return rows, toErr(rc, msg)
}

// CloseConnection disconnects a connection by id.
func (e *Engine) CloseConnection(id uint64) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	return toErr(cCloseConnection(h, id))
}

// Totals reads the fixed-layout counters: the cheapest read.
func (e *Engine) Totals() (Totals, error) {
	h, release, err := e.acquire()
	if err != nil {
		return Totals{}, err
	}
	defer release()
	t, rc, msg := cTotals(h)
	return Totals(t), toErr(rc, msg)
}

// Totals are counters summed over workers and the merged latency.
type Totals totals

// dropNulls removes null members and elements: Go encodes empty slices and
// maps as null, which the engine's strict decoder reads as "wrong type"
// where it expects an omitted key.
func dropNulls(b []byte) ([]byte, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(prune(v))
}

func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
			} else {
				t[k] = prune(x)
			}
		}
	case []any:
		out := t[:0]
		for _, x := range t {
			if x != nil {
				out = append(out, prune(x))
			}
		}
		return out
	}
	return v
}

// versionOK reports whether a schema version fits the C ABI's u32 (and is
// at least 1).
func versionOK(v int) bool { return v >= 1 && v <= math.MaxUint32 }

// PutTransform loads or replaces a schema transform.
func (e *Engine) PutTransform(subject string, from, to int, wasm []byte) (uint64, error) {
	h, release, err := e.acquire()
	if err != nil {
		return 0, err
	}
	defer release()
	if !versionOK(from) || !versionOK(to) {
		return 0, fmt.Errorf("%w: versions are 1 to %d", errs.ErrInvalidArgument, uint32(math.MaxUint32))
	}
	epoch, rc, msg := cPutTransform(h, subject, from, to, wasm)
	return epoch, toErr(rc, msg)
}

// RemoveTransform removes a schema transform.
func (e *Engine) RemoveTransform(subject string, from, to int) error {
	h, release, err := e.acquire()
	if err != nil {
		return err
	}
	defer release()
	if !versionOK(from) || !versionOK(to) {
		return fmt.Errorf("%w: transform %s %d -> %d", errs.ErrNotFound, subject, from, to)
	}
	return toErr(cRemoveTransform(h, subject, from, to))
}

// Transforms lists the schema transforms with their counters.
func (e *Engine) Transforms() ([]engine.TransformStatus, error) {
	var t []engine.TransformStatus
	return t, e.query(queryTransforms, &t)
}

// ModelMeta describes every loaded version of model name (the engine's JSON
// document, passed through). A name with no loaded version is
// errs.ErrNotFound. The first call per model file loads a session.
func (e *Engine) ModelMeta(name string) (json.RawMessage, error) {
	h, release, err := e.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	b, rc, msg := cModelMeta(h, name)
	if err := toErr(rc, msg); err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: engine answered invalid JSON for model %q", errs.ErrInternal, name)
	}
	return json.RawMessage(b), nil
}
