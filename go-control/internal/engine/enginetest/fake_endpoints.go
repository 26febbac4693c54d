package enginetest

import (
	"fmt"
	"slices"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// fakePool is one [[backends]] pool: its config and its endpoints as the
// Fake reports them (no health checks run: an endpoint is healthy).
type fakePool struct {
	cfg       config.Backend
	endpoints []engine.BackendEndpoint
}

// syncBackends builds the pools from the config's [[backends]], as the
// engine does at open.
func (f *Fake) syncBackends() {
	f.pools = nil
	for _, b := range f.cfg.Backends {
		p := &fakePool{cfg: b}
		for _, u := range b.Endpoints {
			p.endpoints = append(p.endpoints, fakeEndpoint(u, b.Models))
		}
		f.pools = append(f.pools, p)
	}
}

func fakeEndpoint(url string, models []string) engine.BackendEndpoint {
	return engine.BackendEndpoint{URL: url, Healthy: true, Models: nonNil(slices.Clone(models))}
}

func (f *Fake) pool(name string) *fakePool {
	for _, p := range f.pools {
		if p.cfg.Name == name {
			return p
		}
	}
	return nil
}

// BackendEndpoint implements engine.Engine with the engine's checks and
// errors.
func (f *Fake) BackendEndpoint(op engine.EndpointOp) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.live(); err != nil {
		return err
	}
	p := f.pool(op.Pool)
	if p == nil {
		return fmt.Errorf("%w: no backend pool %q", errs.ErrNotFound, op.Pool)
	}
	i := slices.IndexFunc(p.endpoints, func(e engine.BackendEndpoint) bool { return e.URL == op.URL })
	if op.Action != engine.EndpointAdd && i < 0 {
		return fmt.Errorf("%w: %s is not in pool %s", errs.ErrNotFound, op.URL, op.Pool)
	}
	switch op.Action {
	case engine.EndpointAdd:
		if i >= 0 {
			return fmt.Errorf("%w: %s is in pool %s", errs.ErrAlreadyExists, op.URL, op.Pool)
		}
		if len(p.endpoints) >= config.BackendEndpointsMax {
			return fmt.Errorf("%w: pool %s has %d endpoints", errs.ErrInvalidArgument, op.Pool, config.BackendEndpointsMax)
		}
		if _, err := config.CheckEndpoint(op.URL); err != nil {
			return fmt.Errorf("%w: %v", errs.ErrInvalidArgument, err)
		}
		p.endpoints = append(p.endpoints, fakeEndpoint(op.URL, p.cfg.Models))
	case engine.EndpointDrain, engine.EndpointUndrain:
		p.endpoints[i].Draining = op.Action == engine.EndpointDrain
	case engine.EndpointRemove:
		p.endpoints = slices.Delete(p.endpoints, i, i+1)
	default:
		return fmt.Errorf("%w: action %q: want add, drain, undrain or remove", errs.ErrInvalidArgument, op.Action)
	}
	return nil
}

// Endpoints returns the endpoints of pool now (nil for no such pool).
func (f *Fake) Endpoints(pool string) []engine.BackendEndpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pool(pool); p != nil {
		return slices.Clone(p.endpoints)
	}
	return nil
}

// SetEndpoint replaces what the Fake reports of an endpoint (health,
// ejection, counters; its URL and draining stay), as a test feeds it;
// false if the pool has no such endpoint.
func (f *Fake) SetEndpoint(pool string, e engine.BackendEndpoint) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pool(pool)
	if p == nil {
		return false
	}
	for i := range p.endpoints {
		if p.endpoints[i].URL == e.URL {
			e.Draining = p.endpoints[i].Draining
			p.endpoints[i] = e
			return true
		}
	}
	return false
}

// backendsStatus is the front door's backends part of the status; nil
// without [[backends]]. f.mu is held.
func (f *Fake) backendsStatus() *engine.BackendsStatus {
	if len(f.pools) == 0 {
		return nil
	}
	st := &engine.BackendsStatus{Pools: []engine.BackendPool{}, Models: map[string]engine.BackendTiming{}}
	for _, p := range f.pools {
		st.Pools = append(st.Pools, engine.BackendPool{Name: p.cfg.Name, Protocol: p.cfg.Protocol, Labels: p.cfg.Labels,
			MaxConcurrency: uint32(p.cfg.MaxConcurrency), QueueDepth: uint32(p.cfg.QueueDepth), Errors: map[string]uint64{},
			Endpoints: nonNil(slices.Clone(p.endpoints))})
	}
	return st
}
