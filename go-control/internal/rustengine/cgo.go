package rustengine

// This is the only file that imports "C". It links the Rust engine built by
// `cargo build --release -p sluice-ffi` (scripts/build-ffi.sh) and wraps each
// C call in a Go function that returns (status, message).
//
// The library is found by -L: a directory given first in the environment
// (CGO_LDFLAGS="-L/other/target/release ...") wins over target/release, so a
// differently-featured build (rdma, dpdk) can be linked without replacing
// the default one.

/*
#cgo CFLAGS: -I${SRCDIR}/../../../ffi/include
#cgo LDFLAGS: -L${SRCDIR}/../../../target/release -lsluice_ffi -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
#include <stdlib.h>
#include "sluice.h"
*/
import "C"

import (
	"bytes"
	"unsafe"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// spansBatchMax is the most records one span call returns.
const spansBatchMax = int(C.SLUICE_SPANS_BATCH_MAX)

// cSpans drains up to len(out) span records in one call (at most
// spansBatchMax) into out.
func cSpans(h handle, out []engine.SpanRecord) (int, int32, string) {
	n := min(len(out), spansBatchMax)
	if n == 0 {
		return 0, 0, ""
	}
	buf := make([]C.SluiceSpan, n)
	var got C.size_t
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_spans(h, &buf[0], C.size_t(n), &got, e, c)
	})
	if rc != 0 {
		return 0, rc, msg
	}
	str := func(b []C.uint8_t) string {
		g := C.GoBytes(unsafe.Pointer(&b[0]), C.int(len(b)))
		if i := bytes.IndexByte(g, 0); i >= 0 {
			g = g[:i]
		}
		return string(g)
	}
	for i := 0; i < int(got); i++ {
		s := &buf[i]
		r := &out[i]
		*r = engine.SpanRecord{
			RecvNs: uint64(s.recv_ns), AuthNs: uint64(s.auth_ns), ValidateNs: uint64(s.validate_ns), RouteNs: uint64(s.route_ns),
			RunStartNs: uint64(s.run_start_ns), RunEndNs: uint64(s.run_end_ns), SendNs: uint64(s.send_ns),
			RequestID: uint64(s.request_id), TenantID: uint32(s.tenant_id), TokenCount: uint32(s.token_count),
			Outcome: uint16(s.outcome), Shard: uint16(s.shard), Worker: uint16(s.worker), Kind: uint8(s.kind), Flags: uint8(s.flags),
			Model: str(s.model[:]), Version: str(s.version[:]), Adapter: str(s.adapter[:]),
		}
		for k := range r.TraceID {
			r.TraceID[k] = byte(s.trace_id[k])
		}
		for k := range r.ParentID {
			r.ParentID[k] = byte(s.parent_id[k])
			r.SpanID[k] = byte(s.span_id[k])
		}
	}
	return int(got), 0, ""
}

// Query kinds of sluice_engine_query, from the header.
const (
	queryStats      = int32(C.SLUICE_QUERY_STATS)
	queryStatus     = int32(C.SLUICE_QUERY_STATUS)
	queryModels     = int32(C.SLUICE_QUERY_MODELS)
	queryTransforms = int32(C.SLUICE_QUERY_TRANSFORMS)
	queryPeers      = int32(C.SLUICE_QUERY_PEERS)
	queryConns      = int32(C.SLUICE_QUERY_CONNECTIONS)
	queryTotals     = int32(C.SLUICE_QUERY_CONNECTION_TOTALS)
)

// Limits are the engine's limits, from the header (generated from the
// engine's own constants). The daemon checks configs against them: they
// are installed in package config at init.
var Limits = config.Limits{
	WorkersMax:          C.SLUICE_WORKERS_MAX,
	RxBurstMax:          C.SLUICE_RX_BURST_MAX,
	SpinUsMax:           C.SLUICE_SPIN_US_MAX,
	ForwardTimeoutMsMax: C.SLUICE_FORWARD_TIMEOUT_MS_MAX,
	RingEntriesMin:      C.SLUICE_RING_ENTRIES_MIN,
	RingEntriesMax:      C.SLUICE_RING_ENTRIES_MAX,
	PoolBuffersMin:      C.SLUICE_POOL_BUFFERS_MIN,
	PoolBuffersMax:      C.SLUICE_POOL_BUFFERS_MAX,
	BufferSizeMin:       C.SLUICE_BUFFER_SIZE_MIN,
	BufferSizeMax:       C.SLUICE_BUFFER_SIZE_MAX,
	BufferAlign:         C.SLUICE_BUFFER_ALIGN,
	ShardsMax:           C.SLUICE_SHARDS_MAX,
	RoutesMax:           C.SLUICE_ROUTES_MAX,
	ContentMax:          C.SLUICE_CONTENT_CONDITIONS_MAX,
	ContentPathDepthMax: C.SLUICE_CONTENT_PATH_SEGMENTS_MAX,
	ContentPathNodesMax: C.SLUICE_CONTENT_PATH_NODES_MAX,
	TenantsMax:          C.SLUICE_TENANTS_MAX,
	ModelsMax:           C.SLUICE_MODELS_MAX,
	AdaptersMax:         C.SLUICE_ADAPTERS_MAX,
	PeersMax:            C.SLUICE_PEERS_MAX,
	MaxConcurrencyMax:   C.SLUICE_CONCURRENCY_MAX,
	QueueDepthMax:       C.SLUICE_QUEUE_DEPTH_MAX,
	BatchMaxMax:         C.SLUICE_BATCH_MAX,
	BatchDelayUsMax:     C.SLUICE_BATCH_DELAY_US_MAX,
	NameLenMax:          C.SLUICE_NAME_LEN_MAX,
	ModelNameLenMax:     C.SLUICE_MODEL_NAME_LEN_MAX,
	ModelVersionLenMax:  C.SLUICE_MODEL_VERSION_LEN_MAX,
	AdapterLenMax:       C.SLUICE_ADAPTER_LEN_MAX,
	TenantKeyLenMin:     C.SLUICE_TENANT_KEY_LEN_MIN,
	NegotiationTTLMsMin: C.SLUICE_NEGOTIATION_TTL_MS_MIN,
	NegotiationTTLMsMax: C.SLUICE_NEGOTIATION_TTL_MS_MAX,
	DrainMsMax:          C.SLUICE_DRAIN_MS_MAX,
	TCPConnectionsMax:   C.SLUICE_TCP_CONNECTIONS_MAX,
	TCPPipelineMax:      C.SLUICE_TCP_PIPELINE_MAX,
	TCPIdleTimeoutMsMax: C.SLUICE_TCP_IDLE_TIMEOUT_MS_MAX,
	TCPSlotClassesMax:   C.SLUICE_TCP_SLOT_CLASSES_MAX,
	TCPSlotCountMax:     C.SLUICE_TCP_SLOT_COUNT_MAX,
	TCPSlotSizeMin:      C.SLUICE_TCP_SLOT_SIZE_MIN,
	TCPSlotSizeMax:      C.SLUICE_TCP_SLOT_SIZE_MAX,
	TCPPoolBytesMax:     C.SLUICE_TCP_POOL_BYTES_MAX,
	TenantPatternsMax:   C.SLUICE_TENANT_PATTERNS_MAX,
	TenantGlobsMax:      C.SLUICE_TENANT_GLOBS_MAX,
	AliasesMax:          C.SLUICE_ALIASES_MAX,
	SubjectLenMax:       C.SLUICE_SUBJECT_LEN_MAX,
	// [auth]
	FreshnessWindowMsMin: C.SLUICE_FRESHNESS_WINDOW_MS_MIN,
	FreshnessWindowMsMax: C.SLUICE_FRESHNESS_WINDOW_MS_MAX,
	ReplayEntriesMin:     C.SLUICE_REPLAY_ENTRIES_MIN,
	ReplayEntriesMax:     C.SLUICE_REPLAY_ENTRIES_MAX,
	ReplaySendersMin:     C.SLUICE_REPLAY_SENDERS_MIN,
	ReplaySendersMax:     C.SLUICE_REPLAY_SENDERS_MAX,
	ReplayWindowIDsMin:   C.SLUICE_REPLAY_WINDOW_IDS_MIN,
	ReplayWindowIDsMax:   C.SLUICE_REPLAY_WINDOW_IDS_MAX,
}

func init() { config.UseEngineLimits(Limits) }

const errCap = 1024

type handle = *C.SluiceEngine

// call runs f with a C error buffer and returns the status and message.
func call(f func(err *C.char, cap C.size_t) C.int32_t) (int32, string) {
	buf := (*C.char)(C.malloc(errCap))
	defer C.free(unsafe.Pointer(buf))
	*buf = 0
	rc := f(buf, errCap)
	return int32(rc), C.GoString(buf)
}

// cBytes copies b into C memory: Rust must never hold Go memory.
func cBytes(b []byte) (*C.uint8_t, C.size_t, func()) {
	if len(b) == 0 {
		return nil, 0, func() {}
	}
	p := C.CBytes(b)
	return (*C.uint8_t)(p), C.size_t(len(b)), func() { C.free(p) }
}

func abiVersion() uint32 { return uint32(C.sluice_abi_version()) }

func cOpen(configJSON []byte) (handle, int32, string) {
	var h handle
	p, n, free := cBytes(configJSON)
	defer free()
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_open(p, n, &h, e, c) })
	return h, rc, msg
}

func cOpenFile(path string) (handle, int32, string) {
	var h handle
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_open_file(cp, &h, e, c) })
	return h, rc, msg
}

func cStart(h handle) (int32, string) {
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_start(h, e, c) })
}

func cStop(h handle, drainMs uint64) (int32, string) {
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_stop(h, C.uint64_t(drainMs), e, c) })
}

func cFree(h handle) { C.sluice_engine_free(h) }

func cApply(h handle, doc []byte) (int32, string) {
	p, n, free := cBytes(doc)
	defer free()
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_apply(h, p, n, e, c) })
}

func cSetAlias(h handle, model, alias, version string) (int32, string) {
	m, a, v := C.CString(model), C.CString(alias), C.CString(version)
	defer C.free(unsafe.Pointer(m))
	defer C.free(unsafe.Pointer(a))
	defer C.free(unsafe.Pointer(v))
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_set_alias(h, m, a, v, e, c) })
}

func cLoadModel(h handle, doc []byte) (int32, string) {
	p, n, free := cBytes(doc)
	defer free()
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_load_model(h, p, n, e, c) })
}

func cAddPeer(h handle, doc []byte) (int32, string) {
	p, n, free := cBytes(doc)
	defer free()
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_add_peer(h, p, n, e, c) })
}

func cBackendEndpoint(h handle, doc []byte) (int32, string) {
	p, n, free := cBytes(doc)
	defer free()
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_backend_endpoint(h, p, n, e, c) })
}

func cRemovePeer(h handle, name string) (int32, string) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_remove_peer(h, cn, e, c) })
}

func cPutTransform(h handle, subject string, from, to int, wasm []byte) (uint64, int32, string) {
	cs := C.CString(subject)
	defer C.free(unsafe.Pointer(cs))
	p, n, free := cBytes(wasm)
	defer free()
	var epoch C.uint64_t
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_put_transform(h, cs, C.uint32_t(from), C.uint32_t(to), p, n, &epoch, e, c)
	})
	return uint64(epoch), rc, msg
}

func cRemoveTransform(h handle, subject string, from, to int) (int32, string) {
	cs := C.CString(subject)
	defer C.free(unsafe.Pointer(cs))
	return call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_remove_transform(h, cs, C.uint32_t(from), C.uint32_t(to), e, c)
	})
}

func cCloseConnection(h handle, id uint64) (int32, string) {
	return call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_close_connection(h, C.uint64_t(id), e, c)
	})
}

// cQuery returns a Go copy of the JSON answer; the Rust buffer is freed here.
func cQuery(h handle, what int32) ([]byte, int32, string) {
	var p *C.uint8_t
	var n C.size_t
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_query(h, C.int32_t(what), &p, &n, e, c)
	})
	if rc != 0 {
		return nil, rc, msg
	}
	out := C.GoBytes(unsafe.Pointer(p), C.int(n))
	C.sluice_buf_free(p, n)
	return out, 0, ""
}

// totals mirrors C.SluiceTotals field for field; layout_test.go checks both.
type totals struct {
	ABIVersion         uint32
	Workers            uint32
	OK                 uint64
	Errors             uint64
	Pings              uint64
	NotSluice          uint64
	RxFrames           uint64
	TxFrames           uint64
	RxNoBuffers        uint64
	TxNoBuffers        uint64
	PayloadBytesCopied uint64
	BufferReuses       uint64
	Epoch              uint64
	LatencyCount       uint64
	LatencyP50Ns       uint64
	LatencyP99Ns       uint64
	LatencyP999Ns      uint64
	LatencyMaxNs       uint64
}

func cTotals(h handle) (totals, int32, string) {
	var t C.SluiceTotals
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t { return C.sluice_engine_totals(h, &t, e, c) })
	return *(*totals)(unsafe.Pointer(&t)), rc, msg
}

// cTotalsLayout reports the C struct's size and a few offsets, for the test.
func cTotalsLayout() (size, ok, epoch, latencyMax uintptr) {
	var t C.SluiceTotals
	return unsafe.Sizeof(t), unsafe.Offsetof(t.ok), unsafe.Offsetof(t.epoch), unsafe.Offsetof(t.latency_max_ns)
}

// cStatusNames lists the C status constants in numeric order, for the test.
func cStatusNames() []int32 {
	return []int32{
		C.SLUICE_STATUS_OK, C.SLUICE_STATUS_INVALID_ARGUMENT, C.SLUICE_STATUS_INVALID_CONFIG,
		C.SLUICE_STATUS_NOT_FOUND, C.SLUICE_STATUS_ALREADY_EXISTS, C.SLUICE_STATUS_BUSY,
		C.SLUICE_STATUS_SHUTTING_DOWN, C.SLUICE_STATUS_NOT_RUNNING, C.SLUICE_STATUS_UNSUPPORTED,
		C.SLUICE_STATUS_IO, C.SLUICE_STATUS_TIMEOUT, C.SLUICE_STATUS_INTERNAL, C.SLUICE_STATUS_PANIC,
	}
}

// cModelMeta returns a Go copy of the model's metadata JSON.
func cModelMeta(h handle, name string) ([]byte, int32, string) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var p *C.uint8_t
	var n C.size_t
	rc, msg := call(func(e *C.char, c C.size_t) C.int32_t {
		return C.sluice_engine_model_meta(h, cn, &p, &n, e, c)
	})
	if rc != 0 {
		return nil, rc, msg
	}
	out := C.GoBytes(unsafe.Pointer(p), C.int(n))
	C.sluice_buf_free(p, n)
	return out, 0, ""
}

// loadSecondsMax is the widest range one load call reads.
const loadSecondsMax = int(C.SLUICE_LOAD_SECONDS_MAX)

// cLoad reads the merged load of seconds from..to keyed by by, in one call
// (two when the first buffer was too small).
func cLoad(h handle, from, to uint64, by uint32, sizeHint int) ([]engine.LoadRow, int32, string) {
	buf := make([]C.SluiceLoadRow, max(sizeHint, 1))
	var got C.size_t
	for range 2 {
		rc, msg := call(func(e *C.char, c C.size_t) C.int32_t {
			return C.sluice_engine_load(h, C.uint64_t(from), C.uint64_t(to), C.uint32_t(by), &buf[0], C.size_t(len(buf)), &got, e, c)
		})
		if rc != 0 {
			return nil, rc, msg
		}
		if int(got) <= len(buf) {
			break
		}
		buf = make([]C.SluiceLoadRow, int(got))
	}
	n := min(int(got), len(buf))
	out := make([]engine.LoadRow, n)
	for i := range n {
		r := &buf[i]
		g := C.GoBytes(unsafe.Pointer(&r.name[0]), C.int(len(r.name)))
		if k := bytes.IndexByte(g, 0); k >= 0 {
			g = g[:k]
		}
		out[i] = engine.LoadRow{Second: uint64(r.second), Key: uint64(r.key), Tokens: uint64(r.tokens),
			Requests: uint64(r.requests), Errors: uint64(r.errors), QueueDepthMax: uint32(r.queue_depth_max), Name: string(g)}
	}
	return out, 0, ""
}
