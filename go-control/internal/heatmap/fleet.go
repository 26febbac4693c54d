package heatmap

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Fleet view: every appliance publishes its recent load by shard on a NATS
// subject (core NATS: no stream, nothing stored) and keeps what the others
// published, so any appliance's page can show the whole fleet.
const (
	// FleetSubject is the subject prefix; an appliance publishes on
	// FleetSubject + "." + its name.
	FleetSubject = "sluice.load"
	// FleetEvery is how often an appliance publishes.
	FleetEvery = 2 * time.Second
	// FleetWindowS is the window an appliance publishes, seconds.
	FleetWindowS = 60
	// FleetStale: an appliance not heard for this long is left out.
	FleetStale = 10 * time.Second
	// FleetAppliancesMax bounds the appliances kept; more are ignored.
	FleetAppliancesMax = 64
	// FleetMessageBytesMax bounds one message; larger ones are ignored.
	FleetMessageBytesMax = 1 << 20
)

// Fleet shares this appliance's load and keeps the other appliances'.
type Fleet struct {
	nc   *nats.Conn
	name string
	log  *slog.Logger

	mu     sync.Mutex
	peers  map[string]peer
	sub    *nats.Subscription
	ignore uint64 // messages ignored (malformed, too large, over the bound)
}

type peer struct {
	doc  Doc
	seen time.Time
}

// NewFleet subscribes to the other appliances' load.
func NewFleet(nc *nats.Conn, name string, log *slog.Logger) (*Fleet, error) {
	f := &Fleet{nc: nc, name: name, log: log, peers: map[string]peer{}}
	sub, err := nc.Subscribe(FleetSubject+".*", f.receive)
	if err != nil {
		return nil, err
	}
	f.sub = sub
	return f, nil
}

func (f *Fleet) receive(m *nats.Msg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var d Doc
	if len(m.Data) > FleetMessageBytesMax || json.Unmarshal(m.Data, &d) != nil || d.Appliance == "" {
		f.ignore++
		return
	}
	if _, known := f.peers[d.Appliance]; !known && len(f.peers) >= FleetAppliancesMax {
		f.ignore++
		return
	}
	f.peers[d.Appliance] = peer{doc: d, seen: time.Now()}
}

// Run publishes this appliance's load (read by shard over the last
// FleetWindowS seconds) every FleetEvery until ctx ends.
func (f *Fleet) Run(ctx context.Context, read func(Query) (Doc, error)) {
	t := time.NewTicker(FleetEvery)
	defer t.Stop()
	for {
		now := uint64(time.Now().Unix())
		q := Query{From: now - FleetWindowS, To: now - 1, Step: 1, ByName: "shard"}
		if d, err := read(q); err == nil {
			d.Appliance = f.name
			if b, err := json.Marshal(d); err == nil {
				if err := f.nc.Publish(FleetSubject+"."+subjectToken(f.name), b); err != nil {
					f.log.Debug("load: publish", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// subjectToken makes an appliance name (a host name by default: dots are
// common) one NATS subject token, so every appliance matches
// FleetSubject + ".*"; the name itself travels in the document.
func subjectToken(name string) string {
	if name == "" {
		return "_"
	}
	b := []byte(name)
	for i, c := range b {
		if c == '.' || c == '*' || c == '>' || c <= ' ' || c == 0x7f {
			b[i] = '_'
		}
	}
	return string(b)
}

// Docs returns the load every appliance heard within FleetStale published,
// this one included once it has heard itself, sorted by appliance.
func (f *Fleet) Docs() []Doc {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Doc, 0, len(f.peers))
	for name, p := range f.peers {
		if time.Since(p.seen) > FleetStale {
			delete(f.peers, name)
			continue
		}
		out = append(out, p.doc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Appliance < out[j].Appliance })
	return out
}

// Close stops listening.
func (f *Fleet) Close() {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
	}
}
