package attacks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// tcpEdits turn TCP on with short frame and idle timers.
var tcpEdits = []string{
	`tcp_listen = ""`, `tcp_listen = "127.0.0.1:0"`,
	`tcp_frame_timeout_ms = 30000`, `tcp_frame_timeout_ms = 2000`,
	`tcp_idle_timeout_ms = 60000`, `tcp_idle_timeout_ms = 3000`,
}

// tcpCloses reads sluice_connection_tcp_closes_total by cause from
// /metrics (summed over workers).
func (a *appliance) tcpCloses() map[string]uint64 {
	a.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(a.admin + "/metrics")
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]uint64{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "sluice_connection_tcp_closes_total{") {
			continue
		}
		_, rest, ok := strings.Cut(l, `cause="`)
		if !ok {
			continue
		}
		cause, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			out[cause] += uint64(v)
		}
	}
	return out
}

// legitTCP sends n signed 1 MiB requests (the MLP on 65,536 rows) over TCP
// and checks each answer's size.
func legitTCP(t *testing.T, c *sluice.Client, n int) latencies {
	rows := uint64(1 << 16)
	x := make([]float32, rows*4)
	for i := range x {
		x[i] = 0.25
	}
	var d []time.Duration
	errs := 0
	var first error
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		resp, err := c.Infer(ctx, sluice.NewRequest("mlp", "1", sluice.NewTensor("x", []uint64{rows, 4}, x)))
		cancel()
		if err == nil {
			if len(resp.Outputs) != 1 || resp.Outputs[0].Dims[0] != rows {
				err = fmt.Errorf("answer of %d outputs", len(resp.Outputs))
			}
			resp.Release()
		}
		if err != nil {
			errs++
			if first == nil {
				first = err
			}
			continue
		}
		d = append(d, time.Since(t0))
	}
	return summarise(d, errs, first)
}

// largeHeader is a request header declaring a 16 MiB tensor, signed with
// key (nil: a random tag where the tag goes).
func largeHeader(t *testing.T, tenant uint32, key []byte) []byte {
	r := wire.Repr{Kind: wire.KindRequest, Flags: wire.FlagAuthenticated, RequestID: 1, TenantID: tenant,
		DeadlineUs: uint64(time.Now().Add(9 * time.Second).UnixMicro()), Model: "mlp", ModelVersion: "1",
		Tensors: []wire.TensorRepr{{Name: "x", DType: wire.F32, Dims: []uint64{1 << 20, 4}}}}
	b, l, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	if key == nil {
		_, _ = rand.Read(b[80:96])
	} else {
		f, err := wire.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		wire.NewTenantKey(key).Sign(&f)
	}
	return b[:l.HeaderLen]
}

// TestTCPTricklersCannotPinSlots: connections that declare 16 MiB frames
// and trickle them (signed: a tenant misbehaving) or send a header whose
// tag does not verify (anyone) while a signed client sends 1 MiB requests
// over TCP: the client is answered, the forged headers are refused at
// once, the tricklers are closed at the frame deadline, all counted.
func TestTCPTricklersCannotPinSlots(t *testing.T) {
	a := start(t, tcpEdits...)
	if a.tcp == "" {
		t.Fatal("status names no TCP address")
	}
	key, _ := hex.DecodeString(demoKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sluice.Dial(ctx, "tcp://"+a.tcp, sluice.Options{TenantID: 1, Key: key, SignedDeadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	legitTCP(t, c, 5) // warm-up
	base := legitTCP(t, c, 20)
	if base.errs > 0 {
		t.Fatalf("alone: %d of %d failed: %v", base.errs, base.n, base.firstErr)
	}
	before, rss0 := a.tcpCloses(), a.rssBytes()
	t0 := time.Now()
	var conns []net.Conn
	for i := range 48 {
		conn, err := dialFrom(fmt.Sprintf("127.0.4.%d", 2+i%8), a.tcp)
		if err != nil {
			continue
		}
		conns = append(conns, conn)
		if i%2 == 0 {
			// Forged: refused before any slot.
			_, _ = conn.Write(largeHeader(t, 1, nil))
			continue
		}
		hdr := largeHeader(t, 1, key)
		go func() {
			if _, err := conn.Write(hdr); err != nil {
				return
			}
			for range 100 {
				if _, err := conn.Write([]byte{0}); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}()
	}
	during := legitTCP(t, c, 20)
	closed := 0
	for _, conn := range conns {
		if closedWithin(conn, max(time.Until(t0.Add(10*time.Second)), 100*time.Millisecond)) {
			closed++
		}
		conn.Close()
	}
	after := a.tcpCloses()
	r := report{name: fmt.Sprintf("%d TCP tricklers / forged 16 MiB headers", len(conns)), base: base, during: during,
		rssBefore: rss0, rssAfter: a.rssBytes(),
		closedRefused: delta(before, after, "unauthenticated", "frame_timeout", "stalled", "per_source", "connections_max")}
	t.Log(r)
	if during.errs > 0 {
		t.Errorf("during the attack %d of %d legitimate 1 MiB requests failed: %v", during.errs, during.n, during.firstErr)
	}
	if closed != len(conns) {
		t.Errorf("%d of %d attacking connections still open 10 s after the attack began", len(conns)-closed, len(conns))
	}
	if after["unauthenticated"]-before["unauthenticated"] < uint64(len(conns)/2) {
		t.Errorf("forged headers refused: %d, want %d", after["unauthenticated"]-before["unauthenticated"], len(conns)/2)
	}
	if after["frame_timeout"]+after["stalled"]-before["frame_timeout"]-before["stalled"] == 0 {
		t.Errorf("no trickler closed by a frame or stall timeout: %v", after)
	}
}
