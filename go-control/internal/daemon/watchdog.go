package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// WorkerCheckEveryDefault is how often the daemon looks for a failed
// data-plane worker.
const WorkerCheckEveryDefault = 500 * time.Millisecond

// watchWorkers reports the first failed worker on the returned channel.
//
// When a worker's loop panics the engine answers what it held, resets the
// worker's per-request state and restarts the loop on its thread, backing
// off a crash loop (docs/design.md "Worker supervision"); restarts are
// counted in status and /metrics, and the daemon leaves them to the engine.
// A worker fails for good only when recovering from a panic panics too:
// then the daemon stops (draining the survivors) and exits non-zero, so
// that the service manager restarts it (Restart=on-failure in
// scripts/sluiced.service) with a clean slate (docs/operations.md, "When a
// worker fails").
func (d *Daemon) watchWorkers(ctx context.Context, every time.Duration) <-chan error {
	if every <= 0 {
		every = WorkerCheckEveryDefault
	}
	out := make(chan error, 1)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st, err := d.eng.Status()
			if err != nil {
				continue
			}
			for _, w := range st.Workers {
				if w.Failed() {
					out <- fmt.Errorf("%w: data-plane worker %d (core %d) failed: %s", errs.ErrInternal, w.Index, w.Core, w.Failure)
					return
				}
			}
		}
	}()
	return out
}
