// Package engine is the Go side of the data-plane engine: the interface the
// daemon drives, the types that cross it, and a registry of implementations.
// The Rust engine is linked through the C ABI in cgo.go (written separately);
// Fake is an in-memory stand-in for unit tests that serves no traffic.
package engine

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Section names a live-changeable part of the config. Its JSON document is
// the array of that section's entries with the TOML key names (see the
// config package types), e.g. SectionRoutes takes `[{"name":..,"shard":..}]`.
type Section string

const (
	SectionRoutes  Section = "routes"
	SectionShards  Section = "shards"
	SectionTenants Section = "tenants" // keys included, as "hex:..."
	SectionModels  Section = "models"
	SectionPeers   Section = "peers"
	SectionSchemas Section = "schemas" // []Schema, pushed from the registry
)

// Sections lists every live section in the order a full apply uses.
var Sections = []Section{SectionShards, SectionTenants, SectionModels, SectionRoutes, SectionPeers, SectionSchemas}

// Change is one section replaced whole.
type Change struct {
	Section Section
	Doc     []byte // JSON
}

// Engine is what the daemon needs from the data plane. All methods are safe
// to call from several goroutines; every error wraps a sentinel of package
// errs (errs.FromStatus maps the C status codes).
type Engine interface {
	// Start pins the workers, opens the transport and begins serving.
	Start() error
	// Stop stops taking new requests, answers the ones in flight, then
	// releases cores and buffers. If ctx ends first it drops the rest and
	// returns errs.ErrTimeout. Calling Stop twice returns errs.ErrNotRunning.
	Stop(ctx context.Context) error
	// Apply replaces the given sections atomically: the engine validates the
	// whole resulting set and either takes all of it at the next burst
	// boundary or refuses all of it with errs.ErrInvalidConfig and a reason.
	Apply(changes ...Change) error
	// SetAlias points a model alias at a loaded version on every core.
	SetAlias(model, alias, version string) error
	// LoadModel loads one more model version (and its adapters).
	LoadModel(spec config.Model) error
	// Models lists loaded model versions and their aliases.
	Models() ([]ModelInfo, error)
	// AddPeer, RemovePeer and Peers manage the forwarding peers.
	AddPeer(p config.Peer) error
	RemovePeer(name string) error
	Peers() ([]PeerStatus, error)
	// Stats returns one consistent snapshot of every counter and histogram.
	Stats() (Stats, error)
	// Status describes the running engine.
	Status() (Status, error)
}

// Schema is one registered schema version pushed to the hot-path validator.
type Schema struct {
	ID         int    `json:"id"`
	Subject    string `json:"subject"`
	Version    int    `json:"version"`
	SchemaType string `json:"schema_type"` // "AVRO", "PROTOBUF", "JSON"
	Schema     string `json:"schema"`
}

// ModelInfo describes one loaded model version.
type ModelInfo struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Kind     string   `json:"kind"`
	Path     string   `json:"path,omitempty"`
	Aliases  []string `json:"aliases"`
	Adapters []string `json:"adapters"`
	State    string   `json:"state"` // "loading", "ready", "failed"
	Error    string   `json:"error,omitempty"`
}

// PeerStatus is a peer and what the engine knows of it.
type PeerStatus struct {
	config.Peer
	State      string `json:"state"` // "up", "down", "connecting"
	Forwarded  uint64 `json:"forwarded"`
	LastSeenNs int64  `json:"last_seen_ns"` // unix time; 0 if never
}

// Status describes the running engine.
type Status struct {
	State     string            `json:"state"` // "created", "running", "draining", "stopped"
	Transport string            `json:"transport"`
	Listen    string            `json:"listen"`
	Hugepages string            `json:"hugepages"` // "hugepages", "fallback" (auto found none), "off"
	Note      string            `json:"note,omitempty"`
	Workers   []WorkerInfo      `json:"workers"`
	Versions  map[string]string `json:"versions"` // "engine", "wire", "onnxruntime"
}

// WorkerInfo is one pinned worker.
type WorkerInfo struct {
	ID    int    `json:"id"`
	Core  int    `json:"core"`
	State string `json:"state"` // "polling", "sleeping", "stopped"
}

// Stats is one snapshot. Counters are cumulative since Start.
// Errors maps the wire error code names (sluice_wire::ErrorCode::as_str,
// e.g. "no_route") to counts.
type Stats struct {
	Workers []WorkerStats `json:"workers"`
	Shards  []ShardStats  `json:"shards"`
}

// WorkerStats are the counters of one worker (one core).
type WorkerStats struct {
	ID            int               `json:"id"`
	Core          int               `json:"core"`
	RxFrames      uint64            `json:"rx_frames"`
	TxFrames      uint64            `json:"tx_frames"`
	Requests      uint64            `json:"requests"`
	Errors        map[string]uint64 `json:"errors"`
	PoolBuffers   uint64            `json:"pool_buffers"`   // buffers in the pool
	PoolInUse     uint64            `json:"pool_in_use"`    // taken now
	BufferReuses  uint64            `json:"buffer_reuses"`  // buffers handed out again
	PoolExhausted uint64            `json:"pool_exhausted"` // times the pool was empty
	Service       Latency           `json:"service"`        // receive to reply
}

// ShardStats are the counters of one queue shard.
type ShardStats struct {
	Name      string            `json:"name"`
	Requests  uint64            `json:"requests"`
	Errors    map[string]uint64 `json:"errors"`
	Forwarded uint64            `json:"forwarded"` // sent to a peer
	Depth     uint64            `json:"depth"`     // queued now
	InFlight  uint64            `json:"in_flight"` // running now
	Queue     Latency           `json:"queue"`     // enqueue to start
	Service   Latency           `json:"service"`   // start to reply
}

// Latency summarises a histogram in nanoseconds. Buckets, when present, are
// cumulative counts with upper bounds, ascending; the last need not be +Inf.
type Latency struct {
	Count   uint64   `json:"count"`
	SumNs   uint64   `json:"sum_ns"`
	P50Ns   uint64   `json:"p50_ns"`
	P90Ns   uint64   `json:"p90_ns"`
	P99Ns   uint64   `json:"p99_ns"`
	P999Ns  uint64   `json:"p999_ns"`
	MaxNs   uint64   `json:"max_ns"`
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	LeNs  uint64 `json:"le_ns"`
	Count uint64 `json:"count"`
}

// Opener creates an engine from the full config (config.Config.JSON()).
// It must not start it.
type Opener func(configJSON []byte) (Engine, error)

var (
	openersMu sync.Mutex
	openers   = map[string]Opener{}
)

// Register makes an implementation available to Open under name. cgo.go
// registers "rust" from an init function.
func Register(name string, o Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers[name] = o
}

// Available lists registered implementation names.
func Available() []string {
	openersMu.Lock()
	defer openersMu.Unlock()
	names := make([]string, 0, len(openers))
	for n := range openers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open creates the named implementation.
func Open(name string, configJSON []byte) (Engine, error) {
	openersMu.Lock()
	o, ok := openers[name]
	openersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: engine %q is not built in (have %v)", errs.ErrUnsupported, name, Available())
	}
	return o(configJSON)
}
