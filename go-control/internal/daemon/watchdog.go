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
// A worker fails when its loop panics: the engine answers what it held,
// counts it and reports it in status, and the other workers keep serving.
// The daemon then stops (draining the survivors) and exits non-zero, so
// that the service manager restarts it (Restart=on-failure in
// scripts/sluiced.service): a panic is a bug or corrupted state, and a new
// process is a clean slate, where restarting one thread in place is not
// (docs/operations.md, "When a worker fails").
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
