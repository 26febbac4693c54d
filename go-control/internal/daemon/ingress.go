package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// Ingress is a front door that feeds requests to the engine's data plane
// from outside the admin API: package jobs (JetStream streams). The daemon
// starts it once the engine serves, drains it on SIGTERM before the engine
// drains, serves its status at /v1/jobs and its metrics at /metrics.
type Ingress interface {
	Start(h IngressHost) error
	// Drain stops taking new work, finishes and acks what it holds, and
	// returns when done or when ctx ends (what is left is handed back).
	Drain(ctx context.Context) error
	Status() api.JobsDoc
	prometheus.Collector
}

// IngressHost is what an Ingress needs of the daemon; *Daemon is one.
type IngressHost interface {
	// EngineListen is the address the engine's data plane bound.
	EngineListen() (string, error)
	// Tenant finds a tenant of the running config by name, or by id when
	// name is "" (keys included: the ingress signs with them).
	Tenant(name string, id int64) (config.Tenant, bool)
	// ModelKind is how the running config serves a model at a version or
	// alias ("": the [openai].default_versions one): config.ModelKind.
	// Jobs for "backend" models go to the OpenAI front door.
	ModelKind(name, version string) string
	// FrontdoorHTTP is the address the engine's HTTP front door (with its
	// OpenAI API) bound; "" when it is off.
	FrontdoorHTTP() (string, error)
}

var _ IngressHost = (*Daemon)(nil)

// EngineListen implements IngressHost.
func (d *Daemon) EngineListen() (string, error) {
	st, err := d.eng.Status()
	if err != nil {
		return "", err
	}
	return st.Listen, nil
}

// Tenant implements IngressHost. It copies one entry, not the config.
func (d *Daemon) Tenant(name string, id int64) (config.Tenant, bool) {
	s := d.state
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.eff.Tenants {
		if (name != "" && t.Name == name) || (name == "" && t.ID == id) {
			return t, true
		}
	}
	return config.Tenant{}, false
}

// ModelKind implements IngressHost.
func (d *Daemon) ModelKind(name, version string) string {
	s := d.state
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eff.ModelKind(name, version)
}

// FrontdoorHTTP implements IngressHost: the address the engine reports
// bound, else the configured one (an engine that reports none).
func (d *Daemon) FrontdoorHTTP() (string, error) {
	st, err := d.eng.Status()
	if err != nil {
		return "", err
	}
	if st.Frontdoor != nil && st.Frontdoor.HTTP != "" {
		return st.Frontdoor.HTTP, nil
	}
	s := d.state
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eff.Frontdoor.HTTPListen, nil
}

func (d *Daemon) getJobs(w http.ResponseWriter, r *http.Request) {
	doc := api.JobsDoc{Streams: []api.JobStreamDoc{}}
	if d.opts.Ingress != nil {
		doc = d.opts.Ingress.Status()
	}
	writeJSON(w, http.StatusOK, doc)
}

// drainIngress drains the ingress within ctx, leaving the engine's own
// drain (drain) and a margin for it.
func (d *Daemon) drainIngress(ctx context.Context, engineDrain time.Duration) error {
	in := d.opts.Ingress
	if in == nil {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-engineDrain-500*time.Millisecond))
		defer cancel()
	}
	d.state.log.Info("draining the jobs ingress")
	err := in.Drain(ctx)
	if err != nil {
		d.state.log.Warn("jobs ingress drain", "err", err)
	} else {
		d.state.log.Info("jobs ingress drained")
	}
	return err
}
