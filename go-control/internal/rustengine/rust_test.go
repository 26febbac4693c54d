package rustengine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// The same numbers as ffi/sluice-ffi/tests/abi.rs totals_layout.
func TestTotalsLayoutMatchesRust(t *testing.T) {
	size, ok, epoch, latMax := cTotalsLayout()
	if size != 136 || ok != 8 || epoch != 88 || latMax != 128 {
		t.Fatalf("C layout: size %d ok@%d epoch@%d latency_max@%d", size, ok, epoch, latMax)
	}
	var g totals
	if unsafe.Sizeof(g) != size || unsafe.Offsetof(g.OK) != ok || unsafe.Offsetof(g.Epoch) != epoch || unsafe.Offsetof(g.LatencyMaxNs) != latMax {
		t.Fatalf("Go mirror differs from C")
	}
}

// Every C status maps to its own sentinel, and back.
func TestStatusCodesMapOneToOne(t *testing.T) {
	seen := map[error]int32{}
	for i, c := range cStatusNames() {
		if c != int32(i) {
			t.Fatalf("status %d has value %d", i, c)
		}
		if c == 0 {
			if toErr(c, "") != nil {
				t.Fatal("ok is an error")
			}
			continue
		}
		err := toErr(c, "msg")
		if errs.StatusOf(err) != errs.Status(c) {
			t.Fatalf("status %d round-trips to %d", c, errs.StatusOf(err))
		}
		for s, prev := range seen {
			if errors.Is(err, s) {
				t.Fatalf("status %d and %d share a sentinel", c, prev)
			}
		}
		seen[errors.Unwrap(err)] = c
	}
}

const testConfig = `{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 16, "tx_buffers": 16, "buffer_size": 4096},
  "shards": [{"name": "s"}],
  "routes": [{"name": "null", "model": "null", "shard": "s"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}`

func ping(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := make([]byte, 96)
	copy(f, "SLCE")
	f[4], f[5] = 1, 6 // version 1, kind ping
	binary.LittleEndian.PutUint16(f[8:], 96)
	binary.LittleEndian.PutUint64(f[16:], 77)
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no pong: %v", err)
	}
	if n < 96 || string(buf[:4]) != "SLCE" || buf[5] != 7 || binary.LittleEndian.Uint64(buf[16:]) != 77 {
		t.Fatalf("not a pong for request 77: % x", buf[:min(n, 32)])
	}
}

func TestRealEngineThroughTheABI(t *testing.T) {
	e, err := engine.Open("rust", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	re := e.(*Engine)
	defer re.Close()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status()
	if err != nil || !st.Running || st.Listen == "" || len(st.Workers) != 1 {
		t.Fatalf("status %+v %v", st, err)
	}
	if w := st.Workers[0]; !w.Alive || w.Failed() {
		t.Fatalf("a serving worker reports %+v", w)
	}
	ping(t, st.Listen)

	// A bad route set is refused whole with the reason; nothing changes.
	err = e.Apply(engine.Change{Section: engine.SectionRoutes, Doc: []byte(`[{"name":"r","shard":"nope"}]`)})
	if !errors.Is(err, errs.ErrInvalidConfig) || !strings.Contains(err.Error(), `no shard named "nope"`) {
		t.Fatalf("bad routes: %v", err)
	}
	// Shards and routes together, atomically.
	err = e.Apply(
		engine.Change{Section: engine.SectionShards, Doc: []byte(`[{"name":"s"},{"name":"t"}]`)},
		engine.Change{Section: engine.SectionRoutes, Doc: []byte(`[{"name":"r2","model":"null","shard":"t"}]`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SetAlias("null", "latest", "9"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("alias to a missing version: %v", err)
	}
	if err := e.AddPeer(config.Peer{Name: "b", Address: "127.0.0.1:7170", Labels: map[string]string{"gpu": "gddr6"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddPeer(config.Peer{Name: "b", Address: "127.0.0.1:7170"}); !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("duplicate peer: %v", err)
	}
	peers, err := e.Peers()
	if err != nil || len(peers) != 1 || peers[0].Name != "b" {
		t.Fatalf("peers %+v %v", peers, err)
	}
	if err := e.LoadModel(config.Model{Name: "null", Version: "2", Kind: "null"}); err != nil {
		t.Fatal(err)
	}
	models, err := e.Models()
	if err != nil || len(models) != 2 {
		t.Fatalf("models %+v %v", models, err)
	}

	time.Sleep(120 * time.Millisecond) // histograms are published every 50 ms
	s, err := e.Stats()
	if err != nil || len(s.Workers) != 1 || s.Workers[0].Pings != 1 || len(s.Shards) != 2 {
		b, _ := json.Marshal(s)
		t.Fatalf("stats %s %v", b, err)
	}
	// The pools come through the ABI: one ping = one receive and one
	// transmit buffer, first touches; the pages behind each pool reported.
	pools := map[string]engine.PoolStats{}
	for _, p := range s.Workers[0].Pools {
		pools[p.Pool] = p
	}
	if rx, tx := pools["rx"], pools["tx"]; rx.Allocs != 1 || rx.FirstTouches != 1 || rx.Reuses != 0 || rx.Capacity == 0 ||
		rx.HugeBytes+rx.NormalBytes == 0 || tx.Allocs != 1 || tx.Touched != 1 || len(pools) != 2 {
		t.Fatalf("pools %+v", s.Workers[0].Pools)
	}
	if len(s.Workers[0].Copies) != 0 {
		t.Fatalf("a ping copies nothing: %+v", s.Workers[0].Copies)
	}
	tot, err := re.Totals()
	if err != nil || tot.Pings != 1 || tot.Workers != 1 || tot.ABIVersion != ABIVersion {
		t.Fatalf("totals %+v %v", tot, err)
	}

	// Schemas with references; one the data plane cannot compile shows up
	// in the status instead of being enforced silently or blocking the push.
	schemas := `[
	  {"id":1,"subject":"addr","version":1,"schemaType":"JSON","schema":"{\"type\":\"object\",\"required\":[\"city\"]}"},
	  {"id":2,"subject":"person","version":1,"schemaType":"JSON","schema":"{\"properties\":{\"home\":{\"$ref\":\"addr.json\"}}}",
	   "references":[{"name":"addr.json","subject":"addr","version":1}]},
	  {"id":3,"subject":"broken","version":1,"schemaType":"PROTOBUF","schema":"syntax = \"proto3\"; import \"gone.proto\"; message M { Gone g = 1; }"}
	]`
	if err := e.Apply(engine.Change{Section: engine.SectionSchemas, Doc: []byte(schemas)}); err != nil {
		t.Fatal(err)
	}
	st, err = e.Status()
	if err != nil || st.Schemas != 3 || len(st.SchemasUnenforced) != 1 || !strings.HasPrefix(st.SchemasUnenforced[0], "id 3 v1:") {
		t.Fatalf("schemas in status: %d %q %v", st.Schemas, st.SchemasUnenforced, err)
	}

	// UDP-only io_uring has no connections: an empty list (not null), unknown ids.
	conns, err := e.Connections()
	if err != nil || conns == nil || len(conns) != 0 {
		t.Fatalf("connections %+v %v", conns, err)
	}
	if err := e.CloseConnection(42); !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), "no connection 42") {
		t.Fatalf("close of an unknown connection: %v", err)
	}
	if tot, err := e.ConnectionTotals(); err != nil || tot == nil || len(tot) != 0 {
		t.Fatalf("connection totals %+v %v", tot, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Stop(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(ctx, 0); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("second stop: %v", err)
	}
}

// TCP beside UDP: a real TCP connection is listed with its counters,
// counted in the totals and closed through the ABI.
func TestTCPConnectionsThroughTheABI(t *testing.T) {
	cfg := `{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 16, "tx_buffers": 16, "buffer_size": 4096,
               "tcp_listen": "127.0.0.1:0", "tcp_connections_max": 4, "tcp_slots": [{"size": 65536, "count": 4}]},
  "shards": [{"name": "s"}],
  "routes": [{"name": "null", "model": "null", "shard": "s"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}`
	e, err := engine.Open("rust", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer e.(*Engine).Close()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := e.Status()
	if err != nil || st.TCPListen == "" {
		t.Fatalf("status %+v %v", st, err)
	}
	c, err := net.Dial("tcp", st.TCPListen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := make([]byte, 96)
	copy(f, "SLCE")
	f[4], f[5] = 1, 6 // version 1, kind ping
	binary.LittleEndian.PutUint16(f[8:], 96)
	binary.LittleEndian.PutUint64(f[16:], 78)
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	pong := make([]byte, 96)
	if _, err := io.ReadFull(c, pong); err != nil || pong[5] != 7 || binary.LittleEndian.Uint64(pong[16:]) != 78 {
		t.Fatalf("no pong over tcp: % x %v", pong[:8], err)
	}
	time.Sleep(50 * time.Millisecond)
	conns, err := e.Connections()
	if err != nil || len(conns) != 1 || conns[0].Transport != "tcp" || conns[0].Peer != c.LocalAddr().String() || conns[0].RxFrames != 1 || conns[0].TxFrames != 1 {
		t.Fatalf("connections %+v %v", conns, err)
	}
	tot, err := e.ConnectionTotals()
	if err != nil || len(tot) != 1 || tot[0].Transport != "tcp" || tot[0].Accepted != 1 || tot[0].Open != 1 {
		t.Fatalf("totals %+v %v", tot, err)
	}
	if err := e.CloseConnection(conns[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the stream goes on after close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigIsRefusedWithTheKey(t *testing.T) {
	_, err := Open([]byte(`{"engine":{"workers":[0],"rx_burst_max":0}}`))
	if !errors.Is(err, errs.ErrInvalidConfig) || !strings.Contains(err.Error(), "engine.rx_burst_max") {
		t.Fatalf("%v", err)
	}
	if _, err := OpenFile("/nonexistent.toml"); !errors.Is(err, errs.ErrInvalidConfig) {
		t.Fatalf("%v", err)
	}
}

func TestNullsAreDropped(t *testing.T) {
	b, err := dropNulls([]byte(`{"a":null,"b":[1,null,{"c":null,"d":2}],"e":{"f":null}}`))
	if err != nil || string(b) != `{"b":[1,{"d":2}],"e":{}}` {
		t.Fatalf("%s %v", b, err)
	}
}

// The limits configs are checked against are the engine's, from the
// header; a build without the engine (sluicectl, the fake) uses the same.
func TestLimitsComeFromTheHeader(t *testing.T) {
	if got := config.EngineLimits(); got != Limits {
		t.Fatalf("installed limits %+v, want the header's %+v", got, Limits)
	}
	if config.BuiltinLimits != Limits {
		t.Fatalf("config.BuiltinLimits %+v drifted from ffi/include/sluice.h %+v: update them", config.BuiltinLimits, Limits)
	}
	if Limits.WorkersMax == 0 || Limits.BufferSizeMax != 1<<20 {
		t.Fatalf("limits not read from the header: %+v", Limits)
	}
}

// Calls racing Close (a metrics scrape, the fleet's load publisher during
// shutdown) either finish on the live engine or get ErrNotRunning; none
// reaches a freed handle (which would crash the daemon, not fail a test).
func TestCallsRacingCloseNeverUseAFreedHandle(t *testing.T) {
	for round := range 20 {
		e, err := engine.Open("rust", []byte(testConfig))
		if err != nil {
			t.Fatal(err)
		}
		re := e.(*Engine)
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan error, 4)
		for range 4 {
			go func() {
				now := uint64(time.Now().Unix())
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					_, err1 := re.Stats()
					_, err2 := re.Load(now-60, now-1, engine.LoadByShard)
					for _, err := range []error{err1, err2} {
						if err != nil && !errors.Is(err, errs.ErrNotRunning) {
							done <- err
							return
						}
					}
				}
			}()
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		re.Close()
		if _, err := re.Stats(); !errors.Is(err, errs.ErrNotRunning) {
			t.Fatalf("stats after close: %v", err)
		}
		close(stop)
		for range 4 {
			if err := <-done; err != nil {
				t.Fatalf("round %d: a call racing close: %v", round, err)
			}
		}
	}
}
