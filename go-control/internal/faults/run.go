package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// Config of one run.
type Config struct {
	Seed     int64
	Duration time.Duration // the fault phase
	Bound    time.Duration // answer to served everywhere, while a majority is up
	// FailoverBound: the same when the stream's leader fails right after.
	FailoverBound time.Duration
	Rate          int // data-plane requests/s per appliance
	WriteEvery    [2]time.Duration
	Dir           string // work dir: logs, stores, the history
	Repo          string // the repository (cfg/fleet.toml)
	NATSServer    string
	Sluiced       string
	Loadgen       string
	Log           io.Writer
}

// Run starts the cluster and the appliances, runs the workload, the
// nemesis, the traffic and the observer for cfg.Duration, repairs
// everything, waits for the fleet to settle, reads the store and the
// appliances, and checks the history. The history is saved in cfg.Dir.
func Run(ctx context.Context, cfg Config) (*History, *Report, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	h := &History{Seed: cfg.Seed, Bound: cfg.Bound, FailoverBound: cfg.FailoverBound, Nodes: []string{"nats:n0", "nats:n1", "nats:n2"}, Apps: []string{"a", "b", "c"}}

	c, err := startCluster(ctx, cfg.NATSServer, cfg.Dir)
	if err != nil {
		return h, nil, err
	}
	defer c.close()
	logf("nats cluster up: %v", c.urls())
	ports, err := freePorts(6, true)
	if err != nil {
		return h, nil, err
	}
	var apps []*appliance
	for i, name := range h.Apps {
		a, err := newAppliance(cfg.Repo, cfg.Dir, cfg.Sluiced, name, ports[2*i], ports[2*i+1], c.urls())
		if err != nil {
			return h, nil, err
		}
		apps = append(apps, a)
	}
	defer func() {
		for _, a := range apps {
			a.p.cont()
			a.p.kill()
		}
	}()
	t0 := time.Now()
	if err := startTogether(ctx, apps); err != nil {
		return h, nil, err
	}
	logf("3 appliances serving, started together, in %v", time.Since(t0).Round(time.Millisecond))
	mix, err := writeMix(cfg.Dir)
	if err != nil {
		return h, nil, err
	}
	buckets := append(store.BucketNames("sluice"), "sluice_schemas")

	// The fault phase.
	h.Start = time.Now()
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var bgWG sync.WaitGroup
	bgWG.Go(func() { observe(bg, h, apps) })
	for _, a := range apps {
		bgWG.Go(func() { traffic(bg, h, a, cfg.Loadgen, mix, cfg.Rate) })
	}
	phase, endPhase := context.WithTimeout(ctx, cfg.Duration)
	defer endPhase()
	w := &workload{h: h, apps: apps, seed: cfg.Seed, interval: cfg.WriteEvery}
	var phaseWG sync.WaitGroup
	for _, a := range apps {
		r := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		phaseWG.Go(func() { w.run(phase, a, r) })
	}
	nem := &nemesis{repair: ctx, h: h, c: c, apps: apps, buckets: buckets, log: logf, errs: make(chan error, 16)}
	nr := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	phaseWG.Go(func() { nem.run(phase, nr) })
	phaseWG.Wait()
	h.FaultEnd = time.Now()
	logf("fault phase over: %d writes, %d fault events", len(h.Writes), len(h.Events))
	nem.heal(ctx)
	select {
	case err := <-nem.errs:
		return h, nil, err
	default:
	}
	took, qerr := quiesce(ctx, c, apps, buckets, 90*time.Second)
	logf("fleet settled %v after the repairs (%v)", took.Round(time.Millisecond), qerr)
	// A few more seconds of traffic and observation on the settled fleet.
	sleep(ctx, 2*time.Second)
	stopBG()
	bgWG.Wait()
	h.Store, err = readStore(ctx, c, buckets)
	if err != nil {
		return h, nil, fmt.Errorf("reading the store: %w", err)
	}
	h.Finals = finals(apps)
	if err := h.Save(filepath.Join(cfg.Dir, "history.json")); err != nil {
		return h, nil, err
	}
	rep := Check(h)
	if qerr != nil {
		rep.violate("%v", qerr)
	}
	rep.line("settled %v after the repairs", took.Round(time.Millisecond))
	return h, rep, nil
}

// startTogether starts every appliance at once on the fresh cluster (they
// race to create the buckets) and waits until all serve.
func startTogether(ctx context.Context, apps []*appliance) error {
	var wg sync.WaitGroup
	errc := make(chan error, len(apps))
	for _, a := range apps {
		wg.Go(func() {
			if err := a.p.start(); err != nil {
				errc <- err
				return
			}
			errc <- a.waitServing(ctx, 90*time.Second)
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return fmt.Errorf("starting the appliances together: %w", err)
		}
	}
	return nil
}
