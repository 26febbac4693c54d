package config

// Limits are the engine's limits a config is checked against, so that the
// daemon accepts exactly what the engine does. Their one source is the
// engine (dataplane/engine/src/config.rs), exported as SLUICE_* in
// ffi/include/sluice.h: a linked engine installs them with UseEngineLimits
// (package rustengine does, at init, from the header's values).
type Limits struct {
	WorkersMax          int
	RxBurstMax          int
	SpinUsMax           int
	ForwardTimeoutMsMax int
	RingEntriesMin      int
	RingEntriesMax      int
	PoolBuffersMin      int
	PoolBuffersMax      int // rx_buffers and tx_buffers, per worker
	BufferSizeMin       int
	BufferSizeMax       int
	BufferAlign         int
	ShardsMax           int
	RoutesMax           int
	ContentMax          int // content conditions per route
	ContentPathDepthMax int
	ContentPathNodesMax int // trie nodes of every content path of a table
	TenantsMax          int
	ModelsMax           int // loaded model versions
	AdaptersMax         int // per model
	PeersMax            int
	MaxConcurrencyMax   int
	QueueDepthMax       int
	BatchMaxMax         int // rows per batched run (batch_max)
	BatchDelayUsMax     int // µs a batch may wait (batch_delay_us)
	NameLenMax          int // shard, route, tenant and peer names
	ModelNameLenMax     int
	ModelVersionLenMax  int
	AdapterLenMax       int
	TenantKeyLenMin     int // bytes of HMAC key
	NegotiationTTLMsMin int // engine.negotiation_ttl_ms
	NegotiationTTLMsMax int
	DrainMsMax          int // control.drain_ms: the C ABI caps a drain there
	TCPConnectionsMax   int
	TCPPipelineMax      int
	TCPIdleTimeoutMsMax int
	TCPSlotClassesMax   int
	TCPSlotCountMax     int
	TCPSlotSizeMin      int // slot sizes are multiples of it
	TCPSlotSizeMax      int
	TCPPoolBytesMax     int64 // receive and reply slots, per worker
	TenantPatternsMax   int   // patterns in each of a tenant's lists
	TenantGlobsMax      int   // general globs in each of a tenant's lists
	AliasesMax          int   // aliases of one model version
	SubjectLenMax       int   // a schema subject on the wire
	// [auth]
	FreshnessWindowMsMin int
	FreshnessWindowMsMax int
	ReplayEntriesMin     int // one bucket of the replay table
	ReplayEntriesMax     int
	ReplaySendersMin     int // one bucket of replay windows
	ReplaySendersMax     int
	ReplayWindowIDsMin   int // one 64-bit word
	ReplayWindowIDsMax   int
}

// BuiltinLimits are the limits a build without the engine (sluicectl, the
// fake engine) checks against: the header's values when this was written.
// rustengine's tests fail when they drift from the header.
var BuiltinLimits = Limits{
	WorkersMax: 64, RxBurstMax: 256, SpinUsMax: 1_000_000, ForwardTimeoutMsMax: 60_000,
	RingEntriesMin: 8, RingEntriesMax: 32768, PoolBuffersMin: 8, PoolBuffersMax: 32768,
	BufferSizeMin: 2048, BufferSizeMax: 1 << 20, BufferAlign: 64,
	ShardsMax: 32, RoutesMax: 16384, ContentMax: 8, ContentPathDepthMax: 8, ContentPathNodesMax: 512, TenantsMax: 4096,
	ModelsMax: 4096, AdaptersMax: 4096, PeersMax: 256, MaxConcurrencyMax: 4096, QueueDepthMax: 65536,
	BatchMaxMax: 256, BatchDelayUsMax: 1_000_000,
	NameLenMax: 64, ModelNameLenMax: 64, ModelVersionLenMax: 32, AdapterLenMax: 64, TenantKeyLenMin: 16,
	NegotiationTTLMsMin: 1_000, NegotiationTTLMsMax: 3_600_000, DrainMsMax: 10_000,
	TCPConnectionsMax: 4096, TCPPipelineMax: 1024, TCPIdleTimeoutMsMax: 3_600_000,
	TCPSlotClassesMax: 4, TCPSlotCountMax: 4096, TCPSlotSizeMin: 4096, TCPSlotSizeMax: 256 << 20,
	TCPPoolBytesMax:   16 << 30,
	TenantPatternsMax: 16384, TenantGlobsMax: 16, AliasesMax: 1024, SubjectLenMax: 255,
	FreshnessWindowMsMin: 100, FreshnessWindowMsMax: 300_000, ReplayEntriesMin: 8, ReplayEntriesMax: 1 << 22,
	ReplaySendersMin: 4, ReplaySendersMax: 1 << 17, ReplayWindowIDsMin: 64, ReplayWindowIDsMax: 8192,
}

// lim are the limits in force: the engine's once it installed them.
var lim = BuiltinLimits

// UseEngineLimits installs the linked engine's limits. Call it at init,
// before any config is checked.
func UseEngineLimits(l Limits) { lim = l }

// EngineLimits returns the limits configs are checked against.
func EngineLimits() Limits { return lim }

// TenantIDMax is the largest tenant id: the wire field is 32 bits.
const TenantIDMax = 1<<32 - 1

// fixedHeaderLen is the wire format's fixed header: the smallest frame.
const fixedHeaderLen = 96

// Defaults of keys inside array tables, as the engine applies them.
const (
	DefaultMaxConcurrency = 8
	DefaultQueueDepth     = 64
	DefaultBatchMax       = 1
	DefaultModelKind      = "onnx"
)
