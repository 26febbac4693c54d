package engine

// LoadDim is the dimension a load read is keyed by.
type LoadDim uint32

// Load dimensions (the engine's numbers).
const (
	LoadByShard  LoadDim = 0 // key: shard index
	LoadByModel  LoadDim = 1 // key: model slot; Name is "name@version"
	LoadByTenant LoadDim = 2 // key: tenant id
)

// Load keys with a meaning of their own.
const (
	LoadTenantOther = ^uint64(0)     // tenants past the ones a worker tells apart
	LoadModelNone   = ^uint64(0)     // requests no local model ran (forwarded, refused)
	LoadModelOther  = ^uint64(0) - 1 // model slots past the ones a worker tells apart
)

// LoadSecondsMax is the widest range one load read covers: each worker
// keeps this many one-second buckets.
const LoadSecondsMax = 900

// LoadRow is one second of one key, summed over the workers.
type LoadRow struct {
	Second        uint64 // since the Unix epoch
	Key           uint64 // shard index, model slot or tenant id
	Tokens        uint64
	Requests      uint64
	Errors        uint64
	QueueDepthMax uint32
	Name          string // by model: "name@version" of the slot
}

// LoadSource is an engine that keeps the token-load heatmap: Load reads
// seconds from..to (inclusive, at most LoadSecondsMax) merged over the
// workers in one call, rows in (second, key) order, empty cells left out.
type LoadSource interface {
	Load(from, to uint64, by LoadDim) ([]LoadRow, error)
}
