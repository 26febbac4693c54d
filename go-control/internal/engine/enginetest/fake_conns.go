package enginetest

import (
	"fmt"
	"sort"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Connections, as a connection-oriented transport (TCP, RDMA) lists them.

// Connect adds a connection as a connection-oriented transport would on
// accept, and returns its id. Only a running engine accepts.
func (f *Fake) Connect(c engine.Connection) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return 0, err
	}
	f.connSeq++
	c.ID = f.connSeq
	if c.State == "" {
		c.State = "up"
	}
	if c.Role == "" {
		c.Role = "client"
	}
	f.conns[c.ID] = &c
	f.totalsOf(c.Transport, c.Listen, c.Worker).Accepted++
	return c.ID, nil
}

// CountConnection adds traffic to a connection's counters, as its worker
// would; false if the id is unknown.
func (f *Fake) CountConnection(id, rxFrames, rxBytes, txFrames, txBytes, errors uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[id]
	if ok {
		c.RxFrames += rxFrames
		c.RxBytes += rxBytes
		c.TxFrames += txFrames
		c.TxBytes += txBytes
		c.Errors += errors
	}
	return ok
}

// Connections implements engine.Engine.
func (f *Fake) Connections() ([]engine.Connection, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.Connection, 0, len(f.conns))
	for _, c := range f.conns {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// CloseConnection implements engine.Engine. The real engine lists a closed
// connection as "closing" until its worker lets go; the Fake drops it at once.
func (f *Fake) CloseConnection(id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.conns[id]
	if !ok {
		return fmt.Errorf("%w: no connection %d", errs.ErrNotFound, id)
	}
	t := f.totalsOf(c.Transport, c.Listen, c.Worker)
	addTraffic(t, c)
	t.Closed++
	delete(f.conns, id)
	return nil
}

func (f *Fake) totalsOf(transport, listen string, worker int) *engine.ConnectionTotals {
	k := connKey{transport, worker}
	t := f.retired[k]
	if t == nil {
		t = &engine.ConnectionTotals{Transport: transport, Listen: listen, Worker: worker}
		f.retired[k] = t
	}
	return t
}

// ConnectionTotals implements engine.Engine: closed connections' counts plus the
// open ones', per transport and worker.
func (f *Fake) ConnectionTotals() ([]engine.ConnectionTotals, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.ConnectionTotals, 0, len(f.retired))
	for k, r := range f.retired {
		t := *r
		for _, c := range f.conns {
			if c.Transport == k.transport && c.Worker == k.worker {
				addTraffic(&t, c)
				t.Open++
			}
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Transport != out[j].Transport {
			return out[i].Transport < out[j].Transport
		}
		return out[i].Worker < out[j].Worker
	})
	return out, nil
}

// addTraffic counts c's traffic into t.
func addTraffic(t *engine.ConnectionTotals, c *engine.Connection) {
	t.RxFrames += c.RxFrames
	t.RxBytes += c.RxBytes
	t.RxLarge += c.RxLarge
	t.TxFrames += c.TxFrames
	t.TxBytes += c.TxBytes
	t.TxLarge += c.TxLarge
	t.Errors += c.Errors
}
