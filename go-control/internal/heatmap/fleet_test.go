package heatmap

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/natstest"
)

// Two appliances on a real nats-server each publish their load and see
// both; a malformed message is ignored, not kept.
func TestFleetSharesLoadOverNATS(t *testing.T) {
	c := natstest.Start(t, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fleets []*Fleet
	for i, name := range []string{"a", "b"} {
		nc, _ := c.Connect()
		t.Cleanup(nc.Close)
		f, err := NewFleet(nc, name, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fleets = append(fleets, f)
		tokens := uint64(100 * (i + 1))
		go f.Run(ctx, func(q Query) (Doc, error) {
			rows := []engine.LoadRow{{Second: q.To, Key: 0, Tokens: tokens, Requests: 1}}
			return Build(rows, q, []string{"s0"}, "ignored"), nil
		})
	}
	nc, _ := c.Connect()
	defer nc.Close()
	if err := nc.Publish(FleetSubject+".junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		docs := fleets[0].Docs()
		if len(docs) == 2 {
			if docs[0].Appliance != "a" || docs[1].Appliance != "b" {
				t.Fatalf("appliances: %s, %s", docs[0].Appliance, docs[1].Appliance)
			}
			last := func(d Doc) uint64 { s := d.Series[0].Tokens; return s[len(s)-1] }
			if last(docs[0]) != 100 || last(docs[1]) != 200 || len(docs[1].Times) != FleetWindowS {
				t.Fatalf("docs: %+v", docs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("appliance a sees %d appliances, want 2", len(docs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		fleets[0].mu.Lock()
		ignored := fleets[0].ignore
		fleets[0].mu.Unlock()
		if ignored == 1 {
			break
		}
		if ignored > 1 || time.Now().After(deadline) {
			t.Fatalf("ignored %d messages, want the malformed one", ignored)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// b subscribed after a's first message: it hears a's next one.
	for len(fleets[1].Docs()) != 2 {
		if time.Now().After(deadline.Add(FleetEvery)) {
			t.Fatalf("appliance b sees %d appliances", len(fleets[1].Docs()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestSubjectTokenIsOneToken(t *testing.T) {
	for in, want := range map[string]string{
		"a": "a", "": "_", "ci-1.example.net": "ci-1_example_net", "x y*>": "x_y__",
	} {
		if got := subjectToken(in); got != want {
			t.Errorf("subjectToken(%q) = %q, want %q", in, got, want)
		}
	}
}
