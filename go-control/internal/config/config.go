// Package config reads the Sluice TOML file: the same file, with the same
// keys, that the Rust engine reads (cfg/sluice.toml is the contract).
// Unknown keys are errors, and every error names file:line and the key.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/sluice-ai/sluice/go-control/internal/jsonnum"
)

// FileSizeMax bounds the config file we are willing to read, in bytes.
const FileSizeMax = 4 << 20

// Config is the whole file. Field names in JSON are the TOML keys, so the
// engine receives the same document shape it would read from TOML.
type Config struct {
	Engine      Engine      `toml:"engine" json:"engine"`
	IOUring     IOUring     `toml:"io_uring" json:"io_uring"`
	Host        Host        `toml:"host" json:"host"`
	ONNXRuntime ONNXRuntime `toml:"onnxruntime" json:"onnxruntime"`
	Shards      []Shard     `toml:"shards" json:"shards"`
	Routes      []Route     `toml:"routes" json:"routes"`
	Models      []Model     `toml:"models" json:"models"`
	Auth        Auth        `toml:"auth" json:"auth"`
	Tenants     []Tenant    `toml:"tenants" json:"tenants"`
	Peers       []Peer      `toml:"peers" json:"peers"`
	Control     Control     `toml:"control" json:"control"`
	// Frontdoor is the KServe v2 / Triton-compatible HTTP and gRPC front
	// door the engine runs (off unless a listen address is set).
	Frontdoor Frontdoor `toml:"frontdoor" json:"frontdoor"`
	// Backends are pools of model servers that serve kind = "backend"
	// models; OpenAI is the OpenAI API the front door serves on
	// frontdoor.http_listen (backends.go). Both are left out of the
	// engine's JSON when not configured.
	Backends []Backend `toml:"backends" json:"backends,omitempty"`
	OpenAI   OpenAI    `toml:"openai" json:"openai,omitzero"`
	// Opaque here: the engine checks [dpdk] and [rdma] (per build feature);
	// the large-frame keys of [dpdk] are checked here too (dpdk.go).
	DPDK map[string]any `toml:"dpdk" json:"dpdk,omitempty"`
	RDMA map[string]any `toml:"rdma" json:"rdma,omitempty"`
	// Fleet is read by the daemon when control.store = "nats"; the engine
	// takes it as an opaque table.
	Fleet Fleet `toml:"fleet" json:"fleet"`
	// Jobs is the JetStream ingress (docs/jobs.md), read by the daemon;
	// the engine takes it as an opaque table.
	Jobs Jobs `toml:"jobs" json:"jobs"`
	// Tracing is request tracing: the engine samples and records, the
	// daemon exports the spans over OTLP/HTTP (docs/observability.md).
	Tracing Tracing `toml:"tracing" json:"tracing"`
	// Streams holds the engine's stream limits (docs/wire.md "Streams");
	// opaque here, checked by the engine.
	Streams map[string]any `toml:"streams" json:"streams,omitempty"`
}

// Tracing is the [tracing] table.
type Tracing struct {
	// SampleRatio (0 to 1) of requests with a trace id but no sampling
	// decision (trace flags 0, no parent span) that are traced; requests
	// with the sampled bit always are, requests without a trace id never.
	SampleRatio float64 `toml:"sample_ratio" json:"sample_ratio"`
	// RingSpans: span records each worker holds until the daemon drains
	// them; a full ring drops records and counts them.
	RingSpans int `toml:"ring_spans" json:"ring_spans"`
	// Endpoint is the OTLP/HTTP base URL ("http://127.0.0.1:4318"); empty:
	// spans are drained and counted, not exported.
	Endpoint string `toml:"endpoint" json:"endpoint,omitempty"`
	// ExportIntervalMs: how often the rings are drained.
	ExportIntervalMs int `toml:"export_interval_ms" json:"export_interval_ms"`
	// ServiceName is the spans' service.name (default "sluiced").
	ServiceName string `toml:"service_name" json:"service_name,omitempty"`
}

// Fleet is the [fleet] table: the NATS JetStream cluster whose KV buckets
// a fleet of appliances shares (see docs/fleet.md).
type Fleet struct {
	Servers      []string `toml:"servers" json:"servers"`             // nats:// or tls:// URLs of the cluster
	Name         string   `toml:"name" json:"name"`                   // this appliance; "" : the host name
	BucketPrefix string   `toml:"bucket_prefix" json:"bucket_prefix"` // buckets are PREFIX_routes, ...
	Replicas     int      `toml:"replicas" json:"replicas"`           // bucket replicas (R3 on 3 nodes)
	CredsFile    string   `toml:"creds_file" json:"creds_file,omitempty"`
	// Timeouts and intervals, in milliseconds.
	ConnectTimeoutMs int `toml:"connect_timeout_ms" json:"connect_timeout_ms"`
	OpTimeoutMs      int `toml:"op_timeout_ms" json:"op_timeout_ms"`
	// A full resync runs this often even when no change was heard.
	ResyncIntervalMs int `toml:"resync_interval_ms" json:"resync_interval_ms"`
	// Changes heard within this window are applied together.
	SettleMs int `toml:"settle_ms" json:"settle_ms"`
	// CheckIntervalMs: how often each bucket's mirror asks the stream
	// leader for its last revision (a watch behind it for two intervals is
	// re-created, and what it missed is read from the leader at once).
	CheckIntervalMs int `toml:"check_interval_ms" json:"check_interval_ms"`
	// History: values kept per key in the buckets (1: the latest only). The
	// stream keeps each change with its change id, so history is an audit
	// trail (nats kv history) and what the fault suite checks against.
	History int `toml:"history" json:"history"`
}

// Engine is the [engine] table.
type Engine struct {
	Workers    []int  `toml:"workers" json:"workers"`
	Transport  string `toml:"transport" json:"transport"`
	RxBurstMax int    `toml:"rx_burst_max" json:"rx_burst_max"`
	Hugepages  string `toml:"hugepages" json:"hugepages"`
	Poll       string `toml:"poll" json:"poll"`
	SpinUs     int    `toml:"spin_us" json:"spin_us"`
	// ForwardTimeoutMs bounds the wait for a peer's answer to a forwarded request.
	ForwardTimeoutMs int `toml:"forward_timeout_ms" json:"forward_timeout_ms"`
	// NegotiationTTLMs is how long a client may cache a negotiated schema
	// (the ttl_ms of a negotiate response).
	NegotiationTTLMs int `toml:"negotiation_ttl_ms" json:"negotiation_ttl_ms"`
	// JSONSchemaFormat is what JSON Schema "format" does on the data plane:
	// "annotation" (unless a schema's dialect opts in) or "assertion".
	JSONSchemaFormat string `toml:"json_schema_format" json:"json_schema_format"`
}

// Auth is the [auth] table (docs/wire.md, "Authentication"), read by the
// engine at start only: a reload that changes it needs a restart.
type Auth struct {
	// Mode is "tenants" (every request and negotiation needs a tenant's
	// valid tag, a fresh deadline and an unseen tag) or "none" (nothing is
	// checked; no tenant may be configured).
	Mode string `toml:"mode" json:"mode"`
	// FreshnessWindowMs: an authenticated frame's deadline must lie in
	// [now, now + this].
	FreshnessWindowMs int `toml:"freshness_window_ms" json:"freshness_window_ms"`
	// ReplayEntries: tags each worker remembers to refuse replays (a power
	// of two).
	ReplayEntries int `toml:"replay_entries" json:"replay_entries"`
	// ReplaySenders: senders (sluice-sender) each worker keeps a replay
	// window for (a power of two); ReplayWindowIDs: request ids one
	// window spans (a power of two). docs/wire.md, "Replay windows".
	ReplaySenders   int `toml:"replay_senders" json:"replay_senders"`
	ReplayWindowIDs int `toml:"replay_window_ids" json:"replay_window_ids"`
	// Lab accepts keys and tokens published in the Sluice repository where
	// other hosts can reach the appliance (refused there otherwise).
	Lab bool `toml:"lab" json:"lab"`
}

// IOUring is the [io_uring] table.
type IOUring struct {
	Listen      string `toml:"listen" json:"listen"`
	RingEntries int    `toml:"ring_entries" json:"ring_entries"`
	RxBuffers   int    `toml:"rx_buffers" json:"rx_buffers"`
	TxBuffers   int    `toml:"tx_buffers" json:"tx_buffers"`
	BufferSize  int    `toml:"buffer_size" json:"buffer_size"`
	// TCPListen is the TCP address every worker listens on beside the UDP
	// socket; "" serves no TCP.
	TCPListen         string `toml:"tcp_listen" json:"tcp_listen"`
	TCPConnectionsMax int    `toml:"tcp_connections_max" json:"tcp_connections_max"`
	// TCPIdleTimeoutMs closes a connection that receives nothing for this
	// long while a byte is awaited: between frames with nothing owed to
	// it, or within a frame.
	TCPIdleTimeoutMs int `toml:"tcp_idle_timeout_ms" json:"tcp_idle_timeout_ms"`
	// TCPFrameTimeoutMs: a frame must arrive whole within this long of its
	// first byte (waiting for a slot included).
	TCPFrameTimeoutMs int `toml:"tcp_frame_timeout_ms" json:"tcp_frame_timeout_ms"`
	// TCPSendTimeoutMs: answers that make no progress for this long (the
	// client does not read) close the connection.
	TCPSendTimeoutMs int `toml:"tcp_send_timeout_ms" json:"tcp_send_timeout_ms"`
	// TCPConnectionsPerSourceMax caps one source address's connections per
	// worker (at most TCPConnectionsMax).
	TCPConnectionsPerSourceMax int `toml:"tcp_connections_per_source_max" json:"tcp_connections_per_source_max"`
	// TCPLargeSlotsPerSourcePct and TCPLargeSlotsPerTenantPct: the share
	// of each large slot class one source address, or one tenant's
	// verified frames, may hold (percent, at least one pair).
	TCPLargeSlotsPerSourcePct int `toml:"tcp_large_slots_per_source_pct" json:"tcp_large_slots_per_source_pct"`
	TCPLargeSlotsPerTenantPct int `toml:"tcp_large_slots_per_tenant_pct" json:"tcp_large_slots_per_tenant_pct"`
	// TCPVerifiedReservePct: with auth.mode "tenants", the share of the
	// smallest slot class only frames whose header tag verified may take.
	TCPVerifiedReservePct int `toml:"tcp_verified_reserve_pct" json:"tcp_verified_reserve_pct"`
	// TCPFrameLenMax is the largest frame accepted over TCP; 0: the largest slot.
	TCPFrameLenMax int `toml:"tcp_frame_len_max" json:"tcp_frame_len_max"`
	TCPPipelineMax int `toml:"tcp_pipeline_max" json:"tcp_pipeline_max"`
	// TCPSlots are the slot classes, smallest first.
	TCPSlots  []TCPSlot `toml:"tcp_slots" json:"tcp_slots"`
	TCPSendZC string    `toml:"tcp_send_zc" json:"tcp_send_zc"`
}

// TCPSlot is one class of TCP slots: Count slots of Size bytes per worker,
// each with a reply slot of the same size.
type TCPSlot struct {
	Size  int `toml:"size" json:"size"`
	Count int `toml:"count" json:"count"`
}

// Host is the [host] table.
type Host struct {
	Labels map[string]string `toml:"labels" json:"labels"`
}

// ONNXRuntime is the [onnxruntime] table.
type ONNXRuntime struct {
	Library string `toml:"library" json:"library,omitempty"` // "": SLUICE_ORT_LIB or the engine's default
}

// Shard is one [[shards]] entry.
type Shard struct {
	Name           string            `toml:"name" json:"name"`
	Labels         map[string]string `toml:"labels" json:"labels,omitempty"`
	MaxConcurrency int               `toml:"max_concurrency" json:"max_concurrency"`
	QueueDepth     int               `toml:"queue_depth" json:"queue_depth"`
	// Workers serving the shard (indexes into engine.workers); nil: all.
	Workers []int `toml:"workers" json:"workers,omitempty"`
	// Dynamic batching: most rows one run stacks (1, the default: off) and
	// how long a batch's first request may wait for more, µs.
	BatchMax     int `toml:"batch_max" json:"batch_max,omitempty"`
	BatchDelayUs int `toml:"batch_delay_us" json:"batch_delay_us,omitempty"`
}

// Route is one [[routes]] entry; empty matchers match anything.
type Route struct {
	Name    string `toml:"name" json:"name"`
	Model   string `toml:"model" json:"model,omitempty"`
	Version string `toml:"version" json:"version,omitempty"`
	Adapter string `toml:"adapter" json:"adapter,omitempty"`
	Intent  string `toml:"intent" json:"intent,omitempty"`
	Tenant  string `toml:"tenant" json:"tenant,omitempty"`
	// Content holds conditions on the request's validated JSON section,
	// all of which must hold, e.g. `$.intent == "reasoning"`.
	Content []string `toml:"content" json:"content,omitempty"`
	Shard   string   `toml:"shard" json:"shard"`
}

// Model is one [[models]] entry.
type Model struct {
	Name    string `toml:"name" json:"name"`
	Version string `toml:"version" json:"version"`
	// Kind: "onnx" (the default), "null", "echo", or "backend" (served by
	// [[backends]] through the OpenAI front door; no path).
	Kind string `toml:"kind" json:"kind"`
	Path string `toml:"path" json:"path,omitempty"`
	// Upstream is the name a backend serves a kind = "backend" model as;
	// "": the model's own name.
	Upstream string    `toml:"upstream" json:"upstream,omitempty"`
	Aliases  []string  `toml:"aliases" json:"aliases,omitempty"`
	Adapters []Adapter `toml:"adapters" json:"adapters,omitempty"`
	// Dynamic batching for this version, overriding its shard's; nil: the
	// shard's applies.
	BatchMax     *int `toml:"batch_max" json:"batch_max,omitempty"`
	BatchDelayUs *int `toml:"batch_delay_us" json:"batch_delay_us,omitempty"`
	// Stream makes the version a stateful stream model: which outputs feed
	// which inputs at the next step (docs/wire.md "Streams"). Opaque here,
	// checked by the engine when it loads the model.
	Stream map[string]any `toml:"stream" json:"stream,omitempty"`
}

// Adapter is a LoRA adapter of a model.
type Adapter struct {
	ID   string `toml:"id" json:"id"`
	Path string `toml:"path" json:"path"`
}

// Tenant is one [[tenants]] entry. Key is secret: never log or serve it.
type Tenant struct {
	Name     string   `toml:"name" json:"name"`
	ID       int64    `toml:"id" json:"id"`
	Key      string   `toml:"key" json:"key,omitempty"`
	Models   []string `toml:"models" json:"models"`     // default ["*"]
	Adapters []string `toml:"adapters" json:"adapters"` // default ["*"]
	Routes   []string `toml:"routes" json:"routes"`     // default ["*"]
	Subjects []string `toml:"subjects" json:"subjects"` // default ["*"]: schema subjects it may negotiate and name
	// Tokens are the bearer tokens the front door accepts for this tenant:
	// "sha256:<hex digest>" or "env:VAR" (VAR holds the token).
	Tokens []string `toml:"tokens" json:"tokens,omitempty"`
}

// Frontdoor is the [frontdoor] table (docs/frontdoor.md).
type Frontdoor struct {
	HTTPListen string `toml:"http_listen" json:"http_listen"` // "": off
	GRPCListen string `toml:"grpc_listen" json:"grpc_listen"` // "": off
	Threads    int    `toml:"threads" json:"threads"`
	Cores      []int  `toml:"cores" json:"cores"` // one per thread, or none; never worker cores
	Slots      int    `toml:"slots" json:"slots"` // requests in flight per thread
	// Size limits in bytes and timeouts in milliseconds.
	BodyBytesMax       int `toml:"body_bytes_max" json:"body_bytes_max"`
	ReplyBytesMax      int `toml:"reply_bytes_max" json:"reply_bytes_max"`
	HandshakeTimeoutMs int `toml:"handshake_timeout_ms" json:"handshake_timeout_ms"`
	IdleTimeoutMs      int `toml:"idle_timeout_ms" json:"idle_timeout_ms"`
	HeaderTimeoutMs    int `toml:"header_timeout_ms" json:"header_timeout_ms"`
	BodyTimeoutMs      int `toml:"body_timeout_ms" json:"body_timeout_ms"`
	WriteTimeoutMs     int `toml:"write_timeout_ms" json:"write_timeout_ms"`
	ConnectionsMax     int `toml:"connections_max" json:"connections_max"` // per thread
	// ConnectionsPerSourceMax bounds one source address (IPv6: one /64)
	// across all threads; SourcesMax bounds the table that counts them.
	ConnectionsPerSourceMax int `toml:"connections_per_source_max" json:"connections_per_source_max"`
	SourcesMax              int `toml:"sources_max" json:"sources_max"`
	// RequestTimeoutMs is the deadline of a request naming none (token
	// streams excepted); HMACSkewMs and HMACNoncesMax bound Sluice-HMAC-v2
	// timestamps and the nonces remembered against replays.
	RequestTimeoutMs int `toml:"request_timeout_ms" json:"request_timeout_ms"`
	HMACSkewMs       int `toml:"hmac_skew_ms" json:"hmac_skew_ms"`
	HMACNoncesMax    int `toml:"hmac_nonces_max" json:"hmac_nonces_max"`
	// TLSCert and TLSKey (PEM files, relative to the config file) put TLS
	// on both listeners; the pair is loaded again when either file changes,
	// checked every TLSReloadMs.
	TLSCert     string `toml:"tls_cert" json:"tls_cert"`
	TLSKey      string `toml:"tls_key" json:"tls_key"`
	TLSReloadMs int    `toml:"tls_reload_ms" json:"tls_reload_ms"`
}

// Peer is one [[peers]] entry: another appliance that serves shards by label.
type Peer struct {
	Name    string `toml:"name" json:"name"`
	Address string `toml:"address" json:"address"`
	// TCPAddress is the peer's io_uring.tcp_listen: frames too large for a
	// datagram are forwarded over TCP to it.
	TCPAddress string            `toml:"tcp_address" json:"tcp_address,omitempty"`
	Labels     map[string]string `toml:"labels" json:"labels,omitempty"`
	// Transport is how forwards reach the peer: "udp" (default, empty) or
	// "rdma" (Address is then the peer's rdma.listen).
	Transport string `toml:"transport" json:"transport,omitempty"`
}

// Control is the [control] table, read by the Go daemon only.
type Control struct {
	AdminListen string `toml:"admin_listen" json:"admin_listen"`
	AdminToken  string `toml:"admin_token" json:"-"`
	Store       string `toml:"store" json:"store"`
	DataDir     string `toml:"data_dir" json:"data_dir"`
	// DrainMs is how long a stop (SIGTERM) keeps answering new requests
	// shutting_down while those in flight finish, before the workers exit.
	DrainMs int `toml:"drain_ms" json:"drain_ms"`
}

// Defaults returns the values used for keys a file leaves out; they are the
// ones listed in cfg/sluice.toml. List sections default to empty.
func Defaults() Config {
	return Config{
		Engine: Engine{
			Workers: []int{0}, Transport: "io_uring", RxBurstMax: 32,
			Hugepages: "auto", Poll: "adaptive", SpinUs: 200, ForwardTimeoutMs: 200,
			NegotiationTTLMs: 60_000,
			JSONSchemaFormat: "annotation",
		},
		IOUring: IOUring{
			Listen: "127.0.0.1:7070", RingEntries: 512, RxBuffers: 256,
			TxBuffers: 256, BufferSize: 65536,
			TCPConnectionsMax: 256, TCPIdleTimeoutMs: 60_000, TCPPipelineMax: 64,
			TCPFrameTimeoutMs: 30_000, TCPSendTimeoutMs: 30_000, TCPConnectionsPerSourceMax: 64,
			TCPLargeSlotsPerSourcePct: 50, TCPLargeSlotsPerTenantPct: 100, TCPVerifiedReservePct: 25,
			TCPSlots:  []TCPSlot{{Size: 64 << 10, Count: 128}, {Size: 2 << 20, Count: 16}, {Size: 16<<20 + 64<<10, Count: 2}},
			TCPSendZC: "auto",
		},
		Auth: Auth{Mode: "tenants", FreshnessWindowMs: 10_000, ReplayEntries: 1 << 18, ReplaySenders: 4096, ReplayWindowIDs: 1024},
		Host: Host{Labels: map[string]string{}},
		Frontdoor: Frontdoor{
			Threads: 1, Cores: []int{}, Slots: 64, BodyBytesMax: 16 << 20, ReplyBytesMax: 16 << 20,
			HandshakeTimeoutMs: 10_000, IdleTimeoutMs: 60_000, HeaderTimeoutMs: 30_000,
			BodyTimeoutMs: 10_000, WriteTimeoutMs: 30_000, ConnectionsMax: 1024,
			ConnectionsPerSourceMax: 256, SourcesMax: 65_536,
			RequestTimeoutMs: 2000, HMACSkewMs: 30_000, HMACNoncesMax: 262_144, TLSReloadMs: 5000,
		},
		Control: Control{
			AdminListen: "127.0.0.1:7071", Store: "embedded",
			DataDir: "../.cache/sluice-data", DrainMs: 200,
		},
		Fleet: Fleet{
			Servers: []string{}, BucketPrefix: "sluice", Replicas: 1,
			ConnectTimeoutMs: 2000, OpTimeoutMs: 5000, ResyncIntervalMs: 5000, SettleMs: 20,
			CheckIntervalMs: 200, History: 1,
		},
		Jobs:    jobsDefaults(),
		Tracing: Tracing{RingSpans: 4096, ExportIntervalMs: 200},
	}
}

// Error is one problem in a config file, located by line and key.
type Error struct {
	File string
	Line int    // 1-based; 0 when unknown
	Key  string // dotted path, e.g. "shards[1].max_concurrency"
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", loc, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
}

// Errors is every problem found in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// Load reads, decodes and validates a file. Relative paths inside it are
// made absolute against the file's directory.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, FileSizeMax+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > FileSizeMax {
		return nil, &Error{File: path, Msg: fmt.Sprintf("file larger than %d bytes", FileSizeMax)}
	}
	return Parse(path, data)
}

// Parse decodes and validates data read from file (used in messages and to
// resolve relative paths).
func Parse(file string, data []byte) (*Config, error) {
	cfg := Defaults()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, decodeError(file, err)
	}
	pos, err := scanPositions(data)
	if err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	cfg.tableDefaults(pos)
	if errs := Validate(&cfg); len(errs) > 0 {
		out := make(Errors, len(errs))
		for i, e := range errs {
			out[i] = &Error{File: file, Line: pos.line(e.Key), Key: e.Key, Msg: e.Msg}
		}
		return nil, out
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, &Error{File: file, Msg: err.Error()}
	}
	cfg.resolvePaths(dir)
	return &cfg, nil
}

// tableDefaults fills keys left out of array-table entries with the
// engine's defaults; a key written as 0 stays 0 and fails validation.
func (c *Config) tableDefaults(pos positions) {
	has := func(k string) bool { _, ok := pos[k]; return ok }
	for i := range c.Shards {
		k := fmt.Sprintf("shards[%d].", i)
		if !has(k + "max_concurrency") {
			c.Shards[i].MaxConcurrency = DefaultMaxConcurrency
		}
		if !has(k + "queue_depth") {
			c.Shards[i].QueueDepth = DefaultQueueDepth
		}
		if !has(k + "batch_max") {
			c.Shards[i].BatchMax = DefaultBatchMax
		}
	}
	for i := range c.Models {
		if !has(fmt.Sprintf("models[%d].kind", i)) {
			c.Models[i].Kind = DefaultModelKind
		}
	}
	for i := range c.Backends {
		k := fmt.Sprintf("backends[%d].", i)
		c.Backends[i].backendDefaults(func(key string) bool { return has(k + key) })
	}
	c.jobStreamDefaults(has)
	for i := range c.Tenants {
		t := &c.Tenants[i]
		k := fmt.Sprintf("tenants[%d].", i)
		for name, l := range map[string]*[]string{"models": &t.Models, "adapters": &t.Adapters, "routes": &t.Routes, "subjects": &t.Subjects} {
			if !has(k + name) {
				*l = []string{"*"}
			}
		}
	}
}

// The JSON forms take the same defaults, and refuse unknown fields, so a
// section PUT through the API means what the same TOML would.

func strictUnmarshal(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// UnmarshalJSON implements json.Unmarshaler with the engine's defaults.
func (s *Shard) UnmarshalJSON(b []byte) error {
	type raw Shard
	r := raw{MaxConcurrency: DefaultMaxConcurrency, QueueDepth: DefaultQueueDepth, BatchMax: DefaultBatchMax}
	if err := strictUnmarshal(b, &r); err != nil {
		return err
	}
	*s = Shard(r)
	return nil
}

// UnmarshalJSON implements json.Unmarshaler with the engine's defaults.
// batch_max and batch_delay_us may be written 8 or 8.0.
func (m *Model) UnmarshalJSON(b []byte) error {
	type raw Model
	r := struct {
		*raw
		BatchMax     *json.Number `json:"batch_max"`      // shadows raw's
		BatchDelayUs *json.Number `json:"batch_delay_us"` // shadows raw's
	}{raw: &raw{Kind: DefaultModelKind}}
	if err := strictUnmarshal(b, &r); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		n    *json.Number
		dst  **int
	}{{"batch_max", r.BatchMax, &r.raw.BatchMax}, {"batch_delay_us", r.BatchDelayUs, &r.raw.BatchDelayUs}} {
		if f.n == nil {
			continue
		}
		v, err := jsonnum.Int64(*f.n)
		if err != nil || v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("%s: %q is not an integer in range", f.name, string(*f.n))
		}
		iv := int(v)
		*f.dst = &iv
	}
	*m = Model(*r.raw)
	return nil
}

// UnmarshalJSON implements json.Unmarshaler with the engine's defaults.
// The id may be written 7 or 7.0 (both are the integer 7 in JSON).
func (t *Tenant) UnmarshalJSON(b []byte) error {
	type raw Tenant
	r := struct {
		*raw
		ID *json.Number `json:"id"` // shadows raw's
	}{raw: &raw{Models: []string{"*"}, Adapters: []string{"*"}, Routes: []string{"*"}, Subjects: []string{"*"}}}
	if err := strictUnmarshal(b, &r); err != nil {
		return err
	}
	if r.ID != nil {
		id, err := jsonnum.Int64(*r.ID)
		if err != nil {
			return fmt.Errorf("tenant id: %w", err)
		}
		r.raw.ID = id
	}
	*t = Tenant(*r.raw)
	return nil
}

func decodeError(file string, err error) error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		out := make(Errors, 0, len(sm.Errors))
		for i := range sm.Errors {
			e := &sm.Errors[i]
			line, _ := e.Position()
			out = append(out, &Error{File: file, Line: line, Key: strings.Join(e.Key(), "."), Msg: "unknown key"})
		}
		return out
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		return &Error{File: file, Line: line, Key: strings.Join(de.Key(), "."), Msg: msg}
	}
	return &Error{File: file, Msg: err.Error()}
}

func (c *Config) resolvePaths(dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.ONNXRuntime.Library = abs(c.ONNXRuntime.Library)
	c.Control.DataDir = abs(c.Control.DataDir)
	c.Fleet.CredsFile = abs(c.Fleet.CredsFile)
	c.Frontdoor.TLSCert = abs(c.Frontdoor.TLSCert)
	c.Frontdoor.TLSKey = abs(c.Frontdoor.TLSKey)
	if sock, ok := strings.CutPrefix(c.Control.AdminListen, "unix:"); ok {
		c.Control.AdminListen = "unix:" + abs(sock)
	}
	for i := range c.Models {
		c.Models[i].Path = abs(c.Models[i].Path)
		for j := range c.Models[i].Adapters {
			c.Models[i].Adapters[j].Path = abs(c.Models[i].Adapters[j].Path)
		}
	}
}

// JSON is the document handed to the engine at start: the whole file with
// paths resolved. The admin token is left out.
func (c *Config) JSON() ([]byte, error) {
	return json.Marshal(c)
}

// Clone returns a deep copy, so the daemon can edit one section safely.
func (c *Config) Clone() *Config {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	var out Config
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	out.Control.AdminToken = c.Control.AdminToken
	return &out
}
