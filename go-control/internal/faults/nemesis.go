package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/natskv"
)

// nemesis injects one fault at a time, holds it, repairs it, and lets the
// fleet settle before the next: SIGKILL or SIGSTOP of a NATS node (a
// random one, a stream leader, or the meta leader), the loss of quorum
// (two nodes killed, a stream leader kept alive so that writes hang in its
// log), and SIGKILL or SIGSTOP of an appliance.
type nemesis struct {
	repair  context.Context // repairs finish even after the fault phase ends
	h       *History
	c       *natsCluster
	apps    []*appliance
	buckets []string
	log     func(format string, args ...any)
	errs    chan error
}

func (n *nemesis) event(op, target, why string) {
	n.h.addEvent(Event{T: time.Now(), Op: op, Target: target, Why: why})
	n.log("nemesis: %s %s %s", op, target, why)
}

// fault records a kill or stop of NATS node i with the streams it leads.
func (n *nemesis) fault(ctx context.Context, op string, i int, why string) {
	var leads []string
	for _, b := range n.buckets {
		if n.c.streamLeader(ctx, natskv.StreamName(b)) == i {
			leads = append(leads, b)
		}
	}
	n.h.addEvent(Event{T: time.Now(), Op: op, Target: nodeName(i), Why: why, Leads: leads})
	n.log("nemesis: %s %s %s (leads %v)", op, nodeName(i), why, leads)
}

func nodeName(i int) string { return fmt.Sprintf("nats:n%d", i) }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// pickNode chooses a NATS node: random, a bucket's stream leader, or the
// meta leader; it says which.
func (n *nemesis) pickNode(ctx context.Context, r *rand.Rand) (int, string) {
	switch r.IntN(3) {
	case 0:
		b := n.buckets[r.IntN(len(n.buckets))]
		if i := n.c.streamLeader(ctx, natskv.StreamName(b)); i >= 0 {
			return i, "leader of " + b
		}
	case 1:
		if i := n.c.metaLeader(); i >= 0 {
			return i, "meta leader"
		}
	}
	return r.IntN(3), "random"
}

func (n *nemesis) run(ctx context.Context, r *rand.Rand) {
	for ctx.Err() == nil {
		sleep(ctx, between(r, 1500*time.Millisecond, 3*time.Second))
		if ctx.Err() != nil {
			return
		}
		hold := between(r, time.Second, 4*time.Second)
		switch k := r.IntN(100); {
		case k < 30:
			i, why := n.pickNode(ctx, r)
			n.fault(ctx, "kill", i, why)
			n.c.nodes[i].kill()
			sleep(ctx, hold)
			n.restartNode(i)
		case k < 50:
			i, why := n.pickNode(ctx, r)
			n.fault(ctx, "stop", i, why)
			n.c.nodes[i].stop()
			sleep(ctx, hold)
			n.event("cont", nodeName(i), "")
			n.c.nodes[i].cont()
		case k < 62:
			// Quorum lost with a stream leader alive: its proposals wait.
			b := n.buckets[r.IntN(len(n.buckets))]
			keep := n.c.streamLeader(ctx, natskv.StreamName(b))
			if keep < 0 {
				keep = r.IntN(3)
			}
			var down []int
			for i := range 3 {
				if i != keep {
					n.fault(ctx, "kill", i, fmt.Sprintf("quorum loss, leader of %s kept", b))
					n.c.nodes[i].kill()
					down = append(down, i)
				}
			}
			sleep(ctx, hold)
			for _, i := range down {
				n.restartNode(i)
			}
		case k < 81:
			a := n.apps[r.IntN(len(n.apps))]
			n.event("kill", "app:"+a.name, "")
			a.p.kill()
			sleep(ctx, hold)
			n.restartApp(n.repair, a)
		default:
			a := n.apps[r.IntN(len(n.apps))]
			n.event("stop", "app:"+a.name, "")
			a.p.stop()
			sleep(ctx, min(hold, 3*time.Second))
			n.event("cont", "app:"+a.name, "")
			a.p.cont()
		}
	}
}

func (n *nemesis) restartNode(i int) {
	n.event("start", nodeName(i), "")
	if err := n.c.nodes[i].start(); err != nil {
		n.errs <- fmt.Errorf("restart %s: %w", nodeName(i), err)
	}
}

func (n *nemesis) restartApp(ctx context.Context, a *appliance) {
	n.event("start", "app:"+a.name, "")
	if err := a.p.start(); err != nil {
		n.errs <- fmt.Errorf("restart %s: %w", a.name, err)
		return
	}
	// An appliance starts from the buckets; with a node just killed the
	// cluster may need a few seconds to answer.
	if err := a.waitServing(ctx, 60*time.Second); err != nil {
		n.errs <- err
		return
	}
	n.event("serving", "app:"+a.name, "")
}

// heal repairs whatever is down after the fault phase.
func (n *nemesis) heal(ctx context.Context) {
	for i, p := range n.c.nodes {
		switch {
		case p.isStopped():
			n.event("cont", nodeName(i), "heal")
			p.cont()
		case !p.running():
			p.kill()
			n.restartNode(i)
		}
	}
	for _, a := range n.apps {
		switch {
		case a.p.isStopped():
			n.event("cont", "app:"+a.name, "heal")
			a.p.cont()
		case !a.p.running():
			a.p.kill()
			n.restartApp(ctx, a)
		}
	}
}
