// Package engine is the Go side of the data-plane engine: the interface the
// daemon drives, the types that cross it, and a registry of implementations.
// The Rust engine is package rustengine (the C ABI); the in-memory Fake for
// tests is package enginetest, kept out of production binaries.
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

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
	// Stop stops taking new requests: for drain, new requests are answered
	// shutting_down (retryable) while the ones in flight finish; then the
	// workers exit and cores and buffers are released. If ctx ends first it
	// drops the rest and returns errs.ErrTimeout. Calling Stop twice
	// returns errs.ErrNotRunning.
	Stop(ctx context.Context, drain time.Duration) error
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
	// BackendEndpoint adds, drains, undrains or removes an endpoint of a
	// [[backends]] pool (docs/backends.md): errs.ErrNotFound for an
	// unknown pool or endpoint, errs.ErrAlreadyExists for an endpoint in
	// its pool, errs.ErrInvalidArgument for a bad URL or a full pool.
	// Endpoints are the front door's: errs.ErrNotRunning before Start.
	BackendEndpoint(op EndpointOp) error
	// Stats returns one consistent snapshot of every counter and histogram.
	Stats() (Stats, error)
	// Status describes the running engine.
	Status() (Status, error)
	// Connections lists the connections of connection-oriented transports
	// (RDMA, and TCP on io_uring with tcp_listen) with their counters;
	// empty for UDP-only io_uring and DPDK.
	Connections() ([]Connection, error)
	// CloseConnection disconnects one connection by id: its requests in
	// flight fail on the client's side with a retryable connection loss.
	// An id the engine does not serve is errs.ErrNotFound.
	CloseConnection(id uint64) error
	// ConnectionTotals returns per-worker connection counters since Start,
	// closed connections included (they only grow); empty where
	// Connections always is.
	ConnectionTotals() ([]ConnectionTotals, error)
	// PutTransform loads or replaces the schema transform of subject from
	// version from to version to (a component of the sluice:transform@1.0.0
	// world, checked before it is accepted: errs.ErrInvalidArgument names
	// what is wrong); every worker moves to it at a burst boundary.
	// Returns the epoch of the tables that name it. Both versions must be
	// registered schemas of the subject (errs.ErrNotFound otherwise).
	PutTransform(subject string, from, to int, wasm []byte) (uint64, error)
	// RemoveTransform removes one; errs.ErrNotFound if there is none.
	RemoveTransform(subject string, from, to int) error
	// Transforms lists the transforms with their workers' counters.
	Transforms() ([]TransformStatus, error)
}

// TransformStatus is one schema transform as the engine reports it.
type TransformStatus struct {
	Subject             string `json:"subject"`
	From                int    `json:"from"`
	To                  int    `json:"to"`
	Digest              string `json:"digest"` // FNV-1a of the module, hex
	Bytes               int    `json:"bytes"`
	LoadedUnixMs        uint64 `json:"loaded_unix_ms"`
	Slot                int    `json:"slot"`
	Calls               uint64 `json:"calls"`
	OK                  uint64 `json:"ok"`
	Refused             uint64 `json:"refused"`
	Traps               uint64 `json:"traps"`
	Timeouts            uint64 `json:"timeouts"`
	OutOfMemory         uint64 `json:"out_of_memory"`
	BadOutputs          uint64 `json:"bad_outputs"`
	RejectedQuarantined uint64 `json:"rejected_quarantined"`
	Quarantines         uint64 `json:"quarantines"`
	Recycles            uint64 `json:"recycles"`
	QuarantinedWorkers  uint64 `json:"quarantined_workers"` // workers whose instance is quarantined now
	BytesIn             uint64 `json:"bytes_in"`
	BytesOut            uint64 `json:"bytes_out"` // the one copy a transform costs
	LastFault           string `json:"last_fault"`
}

// Connection is one client or peer connection (the engine's ConnStatus).
type Connection struct {
	ID        uint64 `json:"id"`
	Transport string `json:"transport"` // "rdma" or "tcp"
	Role      string `json:"role"`      // "client" (accepted) or "peer" (opened to a peer appliance)
	Listen    string `json:"listen"`    // local listen address it came in on
	Worker    int    `json:"worker"`    // worker index serving it
	Peer      string `json:"peer"`      // remote IP:port; "" if unknown
	Device    string `json:"device"`    // RDMA device, e.g. "mlx5_0"; "" for TCP
	State     string `json:"state"`     // "accepting", "connecting", "up", "half_closed" or "closing"
	RxFrames  uint64 `json:"rx_frames"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxLarge   uint64 `json:"rx_large"` // RDMA: frames by RDMA WRITE into a slot; TCP: frames above a datagram
	TxFrames  uint64 `json:"tx_frames"`
	TxBytes   uint64 `json:"tx_bytes"`
	TxLarge   uint64 `json:"tx_large"` // frames sent by RDMA WRITE into a reply slot
	Errors    uint64 `json:"errors"`   // failed or refused operations
}

// ConnectionTotals are one worker's connection counters since Start.
type ConnectionTotals struct {
	Transport string `json:"transport"`
	Listen    string `json:"listen"`
	Worker    int    `json:"worker"`
	Open      uint64 `json:"open"` // connections open now
	Accepted  uint64 `json:"accepted"`
	Closed    uint64 `json:"closed"`
	RxFrames  uint64 `json:"rx_frames"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxLarge   uint64 `json:"rx_large"`
	TxFrames  uint64 `json:"tx_frames"`
	TxBytes   uint64 `json:"tx_bytes"`
	TxLarge   uint64 `json:"tx_large"`
	Errors    uint64 `json:"errors"`
	// TCP only: connections refused or closed by the TCP side, by cause
	// (the engine's TcpTotals fields of the same names).
	Refused          uint64 `json:"refused,omitempty"`            // tcp_connections_max reached
	SourceRefused    uint64 `json:"source_refused,omitempty"`     // tcp_connections_per_source_max reached
	IdleTimeouts     uint64 `json:"idle_timeouts,omitempty"`      // a started frame stalled
	ConnIdleTimeouts uint64 `json:"conn_idle_timeouts,omitempty"` // idle between frames
	FrameTimeouts    uint64 `json:"frame_timeouts,omitempty"`     // a frame not whole in tcp_frame_timeout_ms
	SendTimeouts     uint64 `json:"send_timeouts,omitempty"`      // answers not taken for tcp_send_timeout_ms
	Unauthenticated  uint64 `json:"unauthenticated,omitempty"`    // a large frame's header tag did not verify
	Stale            uint64 `json:"stale,omitempty"`              // a large frame's deadline outside the freshness rule
	Oversized        uint64 `json:"oversized,omitempty"`          // declared length over tcp_frame_len_max
	Malformed        uint64 `json:"malformed,omitempty"`          // not a frame stream
}

// CauseCount is one cause's count.
type CauseCount struct {
	Cause string
	N     uint64
}

// TCPCloses are a TCP worker's refusals and closes by cause, as the
// connection_tcp_closes_total metric labels them.
func (t ConnectionTotals) TCPCloses() []CauseCount {
	return []CauseCount{
		{"connections_max", t.Refused}, {"per_source", t.SourceRefused},
		{"stalled", t.IdleTimeouts}, {"idle", t.ConnIdleTimeouts},
		{"frame_timeout", t.FrameTimeouts}, {"send_timeout", t.SendTimeouts},
		{"unauthenticated", t.Unauthenticated}, {"stale", t.Stale},
		{"oversized", t.Oversized}, {"malformed", t.Malformed},
	}
}

// Schema is one registered schema version pushed to the hot-path validator
// (the engine's SchemaCfg).
type Schema struct {
	ID         int    `json:"id"`
	Subject    string `json:"subject"`
	Version    int    `json:"version"`
	SchemaType string `json:"schemaType"` // "AVRO", "PROTOBUF", "JSON", "TENSOR"
	Schema     string `json:"schema"`
	Retired    bool   `json:"retired,omitempty"` // answers unknown_schema
}

// The types below decode the Rust engine's JSON (stats and status) as it
// is, so the cgo wrapper only has to unmarshal.

// EndpointAction is what an EndpointOp does.
type EndpointAction string

// The actions of an EndpointOp.
const (
	// EndpointAdd adds it; it takes requests once a health check saw it
	// ready.
	EndpointAdd EndpointAction = "add"
	// EndpointDrain: it takes nothing new and finishes what it holds.
	EndpointDrain EndpointAction = "drain"
	// EndpointUndrain: it takes requests again.
	EndpointUndrain EndpointAction = "undrain"
	// EndpointRemove takes it out of the pool; what it holds finishes.
	EndpointRemove EndpointAction = "remove"
)

// EndpointActions lists every action.
var EndpointActions = []EndpointAction{EndpointAdd, EndpointDrain, EndpointUndrain, EndpointRemove}

// EndpointOp is one change to a backend pool's endpoints at run time (the
// engine's EndpointOp).
type EndpointOp struct {
	Pool   string         `json:"pool"`
	URL    string         `json:"url"` // http(s)://host:port, no path
	Action EndpointAction `json:"action"`
}

// ModelInfo describes one loaded model version.
type ModelInfo struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Kind     string   `json:"kind"`
	Aliases  []string `json:"aliases"`
	Adapters []string `json:"adapters"`
}

// PeerStatus is a peer and what the engine knows of it.
type PeerStatus struct {
	config.Peer
	State string `json:"state,omitempty"` // "up", "down", "connecting"; "" if not tracked
}

// Status describes the running engine.
type Status struct {
	Running       bool         `json:"running"`
	Draining      bool         `json:"draining,omitempty"`
	Transport     string       `json:"transport"`
	Listen        string       `json:"listen,omitempty"`
	TCPListen     string       `json:"tcp_listen,omitempty"` // io_uring with tcp_listen
	Hugepages     bool         `json:"hugepages"`            // false: pools fell back to normal pages
	HugepagesNote string       `json:"hugepages_note,omitempty"`
	Epoch         uint64       `json:"epoch"` // config snapshot published
	Workers       []WorkerInfo `json:"workers"`
	Models        []ModelInfo  `json:"models"`
	Schemas       int          `json:"schemas"` // schema versions held
	// SchemasUnenforced lists live schema versions the data plane does not
	// fully enforce ("id 7 v2: why"): keywords it skips, or schemas it could
	// not compile (their requests are refused).
	SchemasUnenforced []string `json:"schemas_unenforced,omitempty"`
	// Versions of the engine, wire format and ONNX Runtime, when reported.
	Versions map[string]string `json:"versions,omitempty"`
	// Frontdoor is the KServe v2 / Triton front door, when running.
	Frontdoor *FrontdoorStatus `json:"frontdoor,omitempty"`
}

// FrontdoorStatus is the front door's bound addresses and counters.
type FrontdoorStatus struct {
	HTTP  string            `json:"http,omitempty"`
	GRPC  string            `json:"grpc,omitempty"`
	Stats map[string]uint64 `json:"stats,omitempty"`
	// Backends are the model-server pools OpenAI requests dispatch to
	// (docs/backends.md), when any are configured.
	Backends *BackendsStatus `json:"backends,omitempty"`
}

// BackendsStatus is every pool and the per-model timings.
type BackendsStatus struct {
	Pools  []BackendPool            `json:"pools"`
	Models map[string]BackendTiming `json:"models"`
}

// BackendPool is one [[backends]] pool: its limits, counters and endpoints.
type BackendPool struct {
	Name           string            `json:"name"`
	Protocol       string            `json:"protocol"`
	Labels         map[string]string `json:"labels"`
	MaxConcurrency uint32            `json:"max_concurrency"`
	QueueDepth     uint32            `json:"queue_depth"`
	Waiting        uint32            `json:"waiting"`
	Requests       uint64            `json:"requests"`
	OK             uint64            `json:"ok"`
	Retries        uint64            `json:"retries"`
	// Errors by cause: connect, timeout, status_5xx, status_4xx, garbage,
	// stream_cut, unavailable, queue_full, cancelled.
	Errors    map[string]uint64 `json:"errors"`
	Latency   Hist              `json:"latency"`
	TTFT      Hist              `json:"ttft"`
	ITL       Hist              `json:"itl"`
	Endpoints []BackendEndpoint `json:"endpoints"`
}

// BackendEndpoint is one endpoint of a pool.
type BackendEndpoint struct {
	URL       string   `json:"url"`
	Healthy   bool     `json:"healthy"`
	Ejected   bool     `json:"ejected"`
	Draining  bool     `json:"draining"`
	InFlight  uint32   `json:"in_flight"`
	Requests  uint64   `json:"requests"`
	Failures  uint64   `json:"failures"`
	Ejections uint64   `json:"ejections"`
	Models    []string `json:"models"`
}

// BackendTiming is one model's latency, time to first token and time
// between tokens, measured at Sluice.
type BackendTiming struct {
	Requests uint64 `json:"requests"`
	Latency  Hist   `json:"latency"`
	TTFT     Hist   `json:"ttft"`
	ITL      Hist   `json:"itl"`
}

// Hist is a latency summary in microseconds.
type Hist struct {
	Count  uint64 `json:"count"`
	MeanUS uint64 `json:"mean_us"`
	P50US  uint64 `json:"p50_us"`
	P90US  uint64 `json:"p90_us"`
	P99US  uint64 `json:"p99_us"`
}

// WorkerInfo is one pinned worker.
type WorkerInfo struct {
	Index int    `json:"index"`
	Core  int    `json:"core"`
	Epoch uint64 `json:"epoch"` // snapshot it runs on
	// Alive: serving; false while the worker is down after a panic
	// (restarting or backing off), once it failed for good, or stopped.
	Alive bool `json:"alive"`
	// Panics caught in the worker's loop; the engine restarts the loop
	// after each (docs/design.md "Worker supervision").
	Panics uint64 `json:"panics"`
	// Restarts of the worker's loop after a panic.
	Restarts uint64 `json:"restarts"`
	// CrashLooping: restarting with back-off, it failed again soon after a
	// restart and has not run a crash window since.
	CrashLooping bool `json:"crash_looping"`
	// FailedForGood: recovering from a panic failed too; the worker serves
	// nothing more.
	FailedForGood bool `json:"failed"`
	// Failure says why the worker last failed, once it has.
	Failure string `json:"failure,omitempty"`
	// FailureAtMs is when it last failed, ms since the Unix epoch.
	FailureAtMs uint64 `json:"failure_at_ms,omitempty"`
}

// Failed reports whether the worker is down for good (its loop panicked
// and recovering failed too): it serves nothing more and the daemon exits
// so that it is restarted. A worker the engine restarted is not failed.
func (w WorkerInfo) Failed() bool { return w.FailedForGood }

// Stats is one snapshot. Counters are cumulative since Start.
type Stats struct {
	Workers []WorkerStats `json:"workers"`
	Shards  []ShardStats  `json:"shards"`  // merged over workers
	Latency Latency       `json:"latency"` // receive to reply, merged
	Models  []ModelStats  `json:"models"`  // per loaded version, merged over workers
	// AdapterCache counts LoRA adapters loaded on demand into the bounded
	// per-worker caches and evicted from them (process-wide).
	AdapterCache AdapterCacheStats `json:"adapter_cache"`
}

// AdapterCacheStats are the adapter caches' counters.
type AdapterCacheStats struct {
	Loads        uint64 `json:"loads"`
	Evictions    uint64 `json:"evictions"`
	LoadFailures uint64 `json:"load_failures"`
}

// ModelStats are one loaded model version's runs, merged over workers; the
// counters Triton reports as nv_inference_request_success,
// nv_inference_count and nv_inference_exec_count, with batch sizes and
// queue delays.
type ModelStats struct {
	Name           string          `json:"name"`
	Version        string          `json:"version"`
	Requests       uint64          `json:"requests"`        // answered by a run of the model
	Inferences     uint64          `json:"inferences"`      // rows (dimension 0) of those requests
	Executions     uint64          `json:"executions"`      // runs, single or batched
	BatchFallbacks uint64          `json:"batch_fallbacks"` // batched runs retried one request at a time
	BatchSize      Buckets         `json:"batch_size"`      // executions by rows run; Sum: rows
	QueueDelayUs   Buckets         `json:"queue_delay_us"`  // requests by µs from receive to their run; Sum: ns
	Tokens         ModelTokenStats `json:"tokens"`          // token streams of a generative model
}

// ModelTokenStats are a generative model's token streams, merged over
// workers: tokens generated, time to first token and inter-token latency
// (µs buckets; Sum in µs), as vLLM and TGI report them.
type ModelTokenStats struct {
	Tokens uint64  `json:"tokens"`
	TTFTUs Buckets `json:"ttft_us"`
	ITLUs  Buckets `json:"itl_us"`
}

// Buckets is a fixed-bucket histogram: Counts[i] values at most Bounds[i]
// (and above Bounds[i-1]); the last count is above every bound.
type Buckets struct {
	Bounds []uint64 `json:"bounds"`
	Counts []uint64 `json:"counts"` // len(Bounds)+1, not cumulative
	Sum    uint64   `json:"sum"`
}

// Count is the number of values recorded.
func (b Buckets) Count() uint64 {
	var n uint64
	for _, c := range b.Counts {
		n += c
	}
	return n
}

// Cumulative returns the counts at or below each bound, as Prometheus
// histograms want them.
func (b Buckets) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(b.Bounds))
	var n uint64
	for i, le := range b.Bounds {
		if i < len(b.Counts) {
			n += b.Counts[i]
		}
		out[float64(le)] = n
	}
	return out
}

// WorkerStats are the counters of one worker (one core).
type WorkerStats struct {
	Index              int          `json:"index"`
	Core               int          `json:"core"`
	Epoch              uint64       `json:"epoch"`
	OK                 uint64       `json:"ok"`                 // responses sent
	Errors             ErrorCounts  `json:"errors"`             // error frames by wire code name
	Refusals           ErrorCounts  `json:"refusals,omitempty"` // by cause: unknown_tenant, bad_tag, replayed, tenant_model, ...
	Pings              uint64       `json:"pings"`
	Negotiations       uint64       `json:"negotiations"`
	NotSluice          uint64       `json:"not_sluice"` // foreign datagrams dropped
	TxNoBuffers        uint64       `json:"tx_no_buffers"`
	PayloadBytesCopied uint64       `json:"payload_bytes_copied"`
	RxFrames           uint64       `json:"rx_frames"`
	TxFrames           uint64       `json:"tx_frames"`
	RxNoBuffers        uint64       `json:"rx_no_buffers"`
	TxErrors           uint64       `json:"tx_errors"`
	RxInUse            uint64       `json:"rx_in_use"` // receive buffers taken now
	TxInUse            uint64       `json:"tx_in_use"`
	BufferReuses       uint64       `json:"buffer_reuses"`
	Sleeps             uint64       `json:"sleeps"`  // adaptive mode
	Latency            Latency      `json:"latency"` // receive to reply
	Shards             []ShardStats `json:"shards,omitempty"`

	// RxKernelDrops are datagrams the kernel dropped in the worker's socket
	// queue before the worker saw them (SO_RXQ_OVFL).
	RxKernelDrops uint64 `json:"rx_kernel_drops"`
	Alive         bool   `json:"alive"`    // serving
	Panics        uint64 `json:"panics"`   // panics caught in its loop
	Restarts      uint64 `json:"restarts"` // restarts of its loop after a panic
	// CrashLooping: restarting with back-off after failing again soon
	// after a restart.
	CrashLooping bool `json:"crash_looping"`

	// Pools are the worker's buffer pools (rx, tx, large): use, reuse and
	// the pages behind them.
	Pools []PoolStats `json:"pools,omitempty"`
	// Copies are payload bytes copied, by path, each with its reason.
	Copies []CopyStats `json:"copies,omitempty"`
	// SpansRecorded and SpansDropped count span records of traced
	// requests pushed to the worker's ring, and dropped when it was full.
	SpansRecorded uint64 `json:"spans_recorded"`
	SpansDropped  uint64 `json:"spans_dropped"`
	SpansUnheld   uint64 `json:"spans_unheld"` // held by a batch when the held table was full: no run times

	// Streams are the worker's stream tables (stateful and token
	// streams); Tokens its token streams (docs/design.md, "Token streams").
	Streams StreamStats `json:"streams"`
	Tokens  TokenStats  `json:"tokens"`
	// Replay is the worker's replay check (docs/wire.md, "Replay windows").
	Replay ReplayStats `json:"replay"`
}

// ReplayStats are one worker's replay-check counts; its refusals are in
// Refusals (replayed, replay_too_old, replay_table_full).
type ReplayStats struct {
	WindowFrames  uint64 `json:"window_frames"`  // accepted through their sender's window
	TagFrames     uint64 `json:"tag_frames"`     // accepted through the tag table
	Fallbacks     uint64 `json:"fallbacks"`      // named a sender but found no free window
	WindowsOpened uint64 `json:"windows_opened"` // senders without a live window
	WindowsLive   uint64 `json:"windows_live"`   // at the worker's last sweep
}

// StreamStats are one worker's stream-table counts.
type StreamStats struct {
	Opened    uint64 `json:"opened"`
	Ended     uint64 `json:"ended"`     // END, CANCEL, a refusal that ends them, unload
	Reclaimed uint64 `json:"reclaimed"` // idle past streams.idle_ms
	Refused   uint64 `json:"refused"`   // stream frames refused
	Steps     uint64 `json:"steps"`
	Open      uint64 `json:"open"`  // now
	Moved     uint64 `json:"moved"` // to another version across an alias switch
}

// TokenStats are one worker's token streams. There is no waiting queue:
// an OPEN is admitted between two decode steps or refused (stream_limit);
// Prefill counts the admitted streams still running their prompt.
type TokenStats struct {
	Tokens uint64 `json:"tokens"` // generated
	Steps  uint64 `json:"steps"`  // prompt and decode steps
	Frames uint64 `json:"frames"` // token frames sent
	// Runs counts the model calls the steps took: fewer than Steps when
	// the streams' decode steps are batched.
	Runs uint64 `json:"runs"`
	// ConnClosed counts streams ended because their TCP connection closed.
	ConnClosed uint64 `json:"conn_closed"`
	// StateBytesCopied counts the bytes of state copied into and out of
	// the batch buffers (the one copy batching costs).
	StateBytesCopied uint64       `json:"state_bytes_copied"`
	Running          uint64       `json:"running"`
	Prefill          uint64       `json:"prefill"`
	Ended            ErrorCounts  `json:"ended"`     // by end reason: eos, max_tokens, deadline, cancelled, ...
	ByTenant         TenantCounts `json:"by_tenant"` // tokens per tenant id
}

// TenantCounts maps tenant ids to counts; it decodes from the engine's
// list of [tenant, count] pairs (or an object keyed by the id).
type TenantCounts map[uint32]uint64

// UnmarshalJSON implements json.Unmarshaler.
func (t *TenantCounts) UnmarshalJSON(b []byte) error {
	var m map[uint32]uint64
	if err := json.Unmarshal(b, &m); err == nil {
		*t = m
		return nil
	}
	var pairs [][2]uint64
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("tenant counts: want an object or [tenant, count] pairs: %w", err)
	}
	out := make(TenantCounts, len(pairs))
	for _, p := range pairs {
		if p[0] > math.MaxUint32 {
			return fmt.Errorf("tenant counts: tenant id %d out of range", p[0])
		}
		out[uint32(p[0])] += p[1]
	}
	*t = out
	return nil
}

// PoolStats is one buffer pool of a worker.
type PoolStats struct {
	Pool         string  `json:"pool"` // rx, tx, large
	Capacity     uint64  `json:"capacity"`
	InUse        uint64  `json:"in_use"`
	Allocs       uint64  `json:"allocs"`        // buffers handed out
	Reuses       uint64  `json:"reuses"`        // handed out again: the same pages reused
	FirstTouches uint64  `json:"first_touches"` // handed out for the first time
	Touched      uint64  `json:"touched"`       // distinct buffers ever handed out
	ReuseRatio   float64 `json:"reuse_ratio"`   // reuses / allocs
	HugeBytes    uint64  `json:"huge_bytes"`    // pool bytes in 2 MiB hugepages
	NormalBytes  uint64  `json:"normal_bytes"`  // pool bytes in normal pages
}

// CopyStats is the payload copied on one path.
type CopyStats struct {
	Path   string `json:"path"`   // echo_reply, model_tensor, forward, relay
	Reason string `json:"reason"` // why that path copies
	Frames uint64 `json:"frames"`
	Bytes  uint64 `json:"bytes"`
}

// Requests is every request answered: ok plus error frames.
func (w *WorkerStats) Requests() uint64 {
	n := w.OK
	for _, v := range w.Errors {
		n += v
	}
	return n
}

// ShardStats are the counters of one queue shard.
type ShardStats struct {
	Name     string  `json:"name"`
	Local    bool    `json:"local"` // served here (the host carries its labels)
	Requests uint64  `json:"requests"`
	Errors   uint64  `json:"errors"`  // error frames after routing
	Queue    Latency `json:"queue"`   // receive to start of service
	Service  Latency `json:"service"` // time in the handler
	Tokens   uint64  `json:"tokens"`  // generated by the shard's token streams
	TTFT     Latency `json:"ttft"`    // token streams: OPEN to the step that chose the first token
	ITL      Latency `json:"itl"`     // token streams: time between tokens
}

// ErrorCounts maps wire error code names (sluice_wire::ErrorCode::as_str,
// e.g. "no_route") to counts. It decodes from an object or from the
// engine's list of [name, count] pairs.
type ErrorCounts map[string]uint64

// UnmarshalJSON implements json.Unmarshaler.
func (e *ErrorCounts) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err == nil {
		*e = m
		return nil
	}
	var pairs [][2]json.RawMessage
	if err := json.Unmarshal(b, &pairs); err != nil {
		return fmt.Errorf("error counts: want an object or [name, count] pairs: %w", err)
	}
	out := make(ErrorCounts, len(pairs))
	for _, p := range pairs {
		var name string
		var n uint64
		if err := json.Unmarshal(p[0], &name); err != nil {
			return fmt.Errorf("error counts: %w", err)
		}
		if err := json.Unmarshal(p[1], &n); err != nil {
			return fmt.Errorf("error counts: %w", err)
		}
		out[name] += n
	}
	*e = out
	return nil
}

// Latency summarises an HDR histogram in nanoseconds. SumNs and Buckets are
// optional: with buckets (cumulative, ascending upper bounds) the metrics
// also carry a Prometheus histogram.
type Latency struct {
	Count   uint64   `json:"count"`
	P50Ns   uint64   `json:"p50_ns"`
	P90Ns   uint64   `json:"p90_ns"`
	P99Ns   uint64   `json:"p99_ns"`
	P999Ns  uint64   `json:"p999_ns"`
	MaxNs   uint64   `json:"max_ns"`
	SumNs   uint64   `json:"sum_ns,omitempty"`
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
