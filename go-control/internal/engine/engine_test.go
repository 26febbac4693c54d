package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

func TestOpenUnknown(t *testing.T) {
	if _, err := Open("warp-drive", []byte("{}")); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeEngineJSON(t *testing.T) {
	// The shape the Rust engine serialises (StatsSnapshot), trimmed.
	js := `{"workers":[{"index":0,"core":1,"epoch":3,"ok":10,"errors":[["no_route",2],["busy",1]],"pings":0,
	"negotiations":0,"not_sluice":0,"tx_no_buffers":0,"payload_bytes_copied":0,"rx_frames":13,"tx_frames":13,
	"rx_no_buffers":0,"tx_errors":0,"rx_in_use":1,"tx_in_use":0,"buffer_reuses":12,"sleeps":4,
	"latency":{"count":13,"p50_ns":5000,"p90_ns":7000,"p99_ns":9000,"p999_ns":9000,"max_ns":9100},"shards":[]}],
	"shards":[{"name":"s","local":true,"requests":12,"errors":2,"queue":{"count":12,"p50_ns":1,"p90_ns":2,"p99_ns":3,"p999_ns":3,"max_ns":3},
	"service":{"count":12,"p50_ns":4,"p90_ns":5,"p99_ns":6,"p999_ns":6,"max_ns":6}}],
	"latency":{"count":13,"p50_ns":5000,"p90_ns":7000,"p99_ns":9000,"p999_ns":9000,"max_ns":9100}}`
	var st Stats
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		t.Fatal(err)
	}
	w := st.Workers[0]
	if w.Errors["no_route"] != 2 || w.Requests() != 13 || w.Latency.P99Ns != 9000 || st.Shards[0].Errors != 2 {
		t.Fatalf("decoded %+v", st)
	}
	var e ErrorCounts
	if err := json.Unmarshal([]byte(`{"busy":3}`), &e); err != nil || e["busy"] != 3 {
		t.Fatalf("object form: %v %v", err, e)
	}
	if err := json.Unmarshal([]byte(`[["busy"]]`), &e); err == nil {
		t.Fatal("bad pairs accepted")
	}
}

func TestDecodeEngineConnections(t *testing.T) {
	// The shape sluice_engine_query(6) returns (the engine's ConnStatus).
	js := `[{"id":7,"transport":"rdma","listen":"10.99.0.1:7471","worker":0,"peer":"10.99.0.1:43210","device":"rxe0",
	"state":"up","rx_frames":5,"rx_bytes":5120,"rx_large":1,"tx_frames":5,"tx_bytes":5200,"tx_large":1,"errors":0},
	{"id":8,"transport":"rdma","listen":"10.99.0.1:7471","worker":1,"peer":null,"device":"rxe0","state":"accepting",
	"rx_frames":0,"rx_bytes":0,"rx_large":0,"tx_frames":0,"tx_bytes":0,"tx_large":0,"errors":0}]`
	var cs []Connection
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != 7 || cs[0].RxLarge != 1 || cs[0].Peer != "10.99.0.1:43210" || cs[1].Peer != "" || cs[1].State != "accepting" {
		t.Fatalf("decoded %+v", cs)
	}
}

// The engine's TcpTotals (transport/tcp/status.rs) decode into the TCP
// causes the connection_tcp_closes_total metric labels.
func TestTCPClosesDecode(t *testing.T) {
	js := `{"transport":"tcp","listen":"127.0.0.1:7072","worker":1,"open":2,"accepted":9,"closed":7,
		"rx_frames":1,"rx_bytes":1,"rx_large":0,"tx_frames":1,"tx_bytes":1,"tx_large":0,"errors":3,
		"refused":1,"source_refused":2,"idle_timeouts":3,"conn_idle_timeouts":4,"frame_timeouts":5,
		"send_timeouts":6,"unauthenticated":7,"stale":8,"share_waits":9,"oversized":10,"malformed":11,
		"slots":[],"hugepages":false}`
	var tot ConnectionTotals
	if err := json.Unmarshal([]byte(js), &tot); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"connections_max": 1, "per_source": 2, "stalled": 3, "idle": 4,
		"frame_timeout": 5, "send_timeout": 6, "unauthenticated": 7, "stale": 8, "oversized": 10, "malformed": 11}
	got := tot.TCPCloses()
	if len(got) != len(want) {
		t.Fatalf("%d causes, want %d", len(got), len(want))
	}
	for _, c := range got {
		if want[c.Cause] != c.N {
			t.Fatalf("%s = %d, want %d", c.Cause, c.N, want[c.Cause])
		}
	}
}
