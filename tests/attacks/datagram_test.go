package attacks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// demoKey is the demo tenant's (id 1) frame key from cfg/sluice.toml.
const demoKey = "73756963652d64656d6f2d6b65792d30303030303030303030303030303030"

// legitUDP sends legitRequests signed MLP requests over the native wire
// from the Go client and measures them.
func legitUDP(t *testing.T, c *sluice.Client) latencies {
	var d []time.Duration
	errs := 0
	var first error
	for range legitRequests {
		x := sluice.NewTensor("x", []uint64{1, 4}, []float32{0.5, -0.25, 1, 0})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		t0 := time.Now()
		resp, err := c.Infer(ctx, sluice.NewRequest("mlp", "1", x))
		cancel()
		if err != nil {
			errs++
			if first == nil {
				first = err
			}
			continue
		}
		d = append(d, time.Since(t0))
		resp.Release()
		time.Sleep(5 * time.Millisecond)
	}
	return summarise(d, errs, first)
}

// TestForgedDatagramsClaimNoTenant sends datagrams that claim tenant ids
// they cannot prove (unsigned, and signed with a random tag) while a
// legitimate signed client runs: the legitimate requests are answered,
// every forged frame is refused and counted, and none of the claimed ids
// gets a row of its own in the per-tenant load (only the configured
// tenant and the shared overflow row may appear).
func TestForgedDatagramsClaimNoTenant(t *testing.T) {
	a := start(t)
	key, _ := hex.DecodeString(demoKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := sluice.Dial(ctx, a.udp, sluice.Options{TenantID: 1, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	legitUDP(t, c) // warm-up: a fresh appliance's first calls pay its cold caches
	base := legitUDP(t, c)
	if base.errs > 0 {
		t.Fatalf("alone: %d of %d failed: %v", base.errs, base.n, base.firstErr)
	}
	rss0 := a.rssBytes()
	refused0 := a.refusedFrames()

	conn, err := net.Dial("udp", a.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const forged = 400
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range forged {
			r := wire.Repr{Kind: wire.KindRequest, RequestID: uint64(i + 1), TenantID: uint32(1000 + i),
				DeadlineUs: uint64(time.Now().Add(time.Second).UnixMicro()), Model: "mlp", ModelVersion: "1"}
			if i%2 == 1 {
				r.Flags = wire.FlagAuthenticated
			}
			b, _, err := r.Append(nil)
			if err != nil {
				continue
			}
			if i%2 == 1 {
				// A random tag where the real one would be: not the key's.
				_, _ = rand.Read(b[80:96])
			}
			_, _ = conn.Write(b)
			time.Sleep(time.Millisecond)
		}
	}()
	during := legitUDP(t, c)
	<-done
	// The answers to the forged frames are error frames; drain a few.
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	answers := 0
	buf := make([]byte, 2048)
	for {
		if _, err := conn.Read(buf); err != nil {
			break
		}
		answers++
	}
	refused := a.refusedFrames() - refused0
	var load struct {
		Series []struct {
			Key string `json:"key"`
		} `json:"series"`
	}
	a.getJSON("/v1/load?by=tenant&from=-120&to=0&step=60", &load)
	var keys []string
	for _, s := range load.Series {
		keys = append(keys, s.Key)
		if strings.HasPrefix(s.Key, "tenant-") && s.Key != "tenant-1" {
			t.Errorf("a claimed tenant got a load row of its own: %q", s.Key)
		}
	}
	r := report{name: fmt.Sprintf("%d forged datagrams (claimed tenants)", forged), base: base, during: during,
		rssBefore: rss0, rssAfter: a.rssBytes(),
		closedRefused: fmt.Sprintf("refused +%d (error frames read: %d); tenant rows: %v", refused, answers, keys)}
	t.Log(r)
	if during.errs > 0 {
		t.Errorf("during the flood %d of %d legitimate requests failed: %v", during.errs, during.n, during.firstErr)
	}
	if refused < forged {
		t.Errorf("%d forged frames refused, want %d", refused, forged)
	}
}

// refusedFrames sums the engine's refusals (auth causes) over workers.
func (a *appliance) refusedFrames() uint64 {
	var st struct {
		Workers []struct {
			Refusals map[string]uint64 `json:"refusals"`
		} `json:"workers"`
	}
	a.getJSON("/v1/stats", &st)
	var n uint64
	for _, w := range st.Workers {
		for _, v := range w.Refusals {
			n += v
		}
	}
	return n
}
