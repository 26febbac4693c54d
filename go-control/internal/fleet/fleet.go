// Package fleet runs a sluiced as one appliance of a fleet: the control
// state (routes, tenants, models, aliases, peers) and the schema registry
// live in NATS JetStream KV buckets shared by every appliance, and each
// appliance applies what the others write through the same path as its
// own changes (daemon Reload and registry Refresh: the effective config is
// recomposed, validated whole, and sent to the engine in one Apply).
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
	"github.com/sluice-ai/sluice/go-control/registry/natsstore"
)

// ReconnectWait spaces reconnect attempts to the cluster.
const ReconnectWait = 250 * time.Millisecond

// SchemasBucketSuffix names the registry's bucket: PREFIX_schemas.
const SchemasBucketSuffix = "_schemas"

// Target is what the fleet drives: a daemon.
type Target interface {
	Reload() (api.ReloadResult, error)
	RefreshSchemas(ctx context.Context) error
}

var _ Target = (*daemon.Daemon)(nil)

// Fleet is this appliance's link to the cluster.
type Fleet struct {
	cfg      config.Fleet
	name     string
	log      *slog.Logger
	nc       *nats.Conn
	Store    *store.NATS      // control state; pass as daemon.Options.Store
	Registry *natsstore.Store // schema registry; pass as daemon.Options.RegistryStore

	ctrlDirty   chan struct{}
	schemaDirty chan struct{}
	reconnected chan struct{}

	mu    sync.Mutex
	stats Stats
}

// Stats count what the fleet loop did.
type Stats struct {
	ControlResyncs   uint64 // reloads that succeeded (applied or found nothing new)
	ControlRefused   uint64 // reloads refused: the shared state is not valid here (yet)
	SchemaRefreshes  uint64
	SchemaFailures   uint64
	Reconnects       uint64
	LastControlError string
}

// Connect dials the cluster and opens (creating if needed) the buckets.
func Connect(ctx context.Context, cfg config.Fleet, log *slog.Logger) (*Fleet, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: fleet.servers is empty", errs.ErrInvalidConfig)
	}
	name := cfg.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	f := &Fleet{
		cfg: cfg, name: name, log: log.With("fleet", name),
		ctrlDirty: make(chan struct{}, 1), schemaDirty: make(chan struct{}, 1), reconnected: make(chan struct{}, 1),
	}
	opts := []nats.Option{
		nats.Name("sluiced " + name),
		nats.Timeout(time.Duration(cfg.ConnectTimeoutMs) * time.Millisecond),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.RetryOnFailedConnect(false),
		nats.ReconnectHandler(func(c *nats.Conn) {
			f.log.Info("reconnected to the fleet", "server", c.ConnectedUrlRedacted())
			signal(f.reconnected)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				f.log.Warn("disconnected from the fleet; reconnecting", "err", err)
			}
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	nc, err := nats.Connect(strings.Join(cfg.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: fleet: connect %v: %w", errs.ErrIO, cfg.Servers, err)
	}
	f.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: fleet: jetstream: %w", errs.ErrIO, err)
	}
	opTimeout := time.Duration(cfg.OpTimeoutMs) * time.Millisecond
	f.Store, err = store.OpenNATS(ctx, js, store.NATSOptions{BucketPrefix: cfg.BucketPrefix, Replicas: cfg.Replicas, OpTimeout: opTimeout})
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		f.Registry, err = natsstore.Open(rctx, js, cfg.BucketPrefix+SchemasBucketSuffix, cfg.Replicas)
		cancel()
		if err != nil {
			err = fmt.Errorf("%w: fleet: %w", errs.ErrIO, err)
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return f, nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (f *Fleet) markControl() { signal(f.ctrlDirty) }
func (f *Fleet) markSchemas() { signal(f.schemaDirty) }

// Stats returns a copy of the counters.
func (f *Fleet) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// watch (re)starts the bucket watchers; the returned cancel stops them.
func (f *Fleet) watch(ctx context.Context) (context.CancelFunc, error) {
	wctx, cancel := context.WithCancel(ctx)
	err := errors.Join(f.Store.Watch(wctx, f.markControl), f.Registry.Watch(wctx, f.markSchemas))
	if err != nil {
		cancel()
		return nil, err
	}
	return cancel, nil
}

// Run applies the fleet's state to t until ctx ends: once at start (to
// catch what changed between loading and now), after every change heard
// on the buckets, after a reconnect, and every resync_interval_ms.
// Changes heard within settle_ms are applied together.
func (f *Fleet) Run(ctx context.Context, t Target) error {
	stopWatch, err := f.watch(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	defer func() { stopWatch() }()
	settle := time.Duration(f.cfg.SettleMs) * time.Millisecond
	tick := time.NewTicker(time.Duration(f.cfg.ResyncIntervalMs) * time.Millisecond)
	defer tick.Stop()
	f.markControl()
	f.markSchemas()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.ctrlDirty:
			f.markControl()
		case <-f.schemaDirty:
			f.markSchemas()
		case <-tick.C:
			if !f.Store.Watching() {
				// The last watch failed or ended under us: try again.
				stopWatch = f.rewatch(ctx, stopWatch)
			}
			f.markControl()
			f.markSchemas()
		case <-f.reconnected:
			f.mu.Lock()
			f.stats.Reconnects++
			f.mu.Unlock()
			// Watchers may have missed writes while we were away; start
			// them afresh and resync everything.
			stopWatch = f.rewatch(ctx, stopWatch)
			f.markControl()
			f.markSchemas()
		}
		if settle > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(settle):
			}
		}
		f.apply(ctx, t)
	}
}

// rewatch stops the running watch and starts a new one; on failure reads
// go to the server and the next interval tries again.
func (f *Fleet) rewatch(ctx context.Context, stop context.CancelFunc) context.CancelFunc {
	stop()
	c, err := f.watch(ctx)
	if err != nil {
		f.log.Warn("fleet watch failed; resyncing on the interval", "err", err)
		return func() {}
	}
	return c
}

// apply runs whatever is marked dirty.
func (f *Fleet) apply(ctx context.Context, t Target) {
	ctrl, schemas := take(f.ctrlDirty), take(f.schemaDirty)
	if schemas {
		err := t.RefreshSchemas(ctx)
		f.mu.Lock()
		if err != nil {
			f.stats.SchemaFailures++
		} else {
			f.stats.SchemaRefreshes++
		}
		f.mu.Unlock()
		if err != nil {
			f.log.Warn("schema refresh from the fleet failed; retrying on the next change or interval", "err", err)
		}
	}
	if ctrl {
		_, err := t.Reload() // logs its own outcome; a refusal leaves the running config whole
		f.mu.Lock()
		if err != nil {
			f.stats.ControlRefused++
			f.stats.LastControlError = err.Error()
		} else {
			f.stats.ControlResyncs++
			f.stats.LastControlError = ""
		}
		f.mu.Unlock()
	}
}

func take(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Status is what GET /v1/fleet answers.
type Status struct {
	Name      string   `json:"name"`
	Servers   []string `json:"servers"`
	Connected string   `json:"connected"` // the node in use; "" while reconnecting
	Watching  bool     `json:"watching"`  // buckets mirrored and watched
	Buckets   []string `json:"buckets"`
	Stats
}

// Status describes the link to the cluster.
func (f *Fleet) Status() Status {
	st := Status{Name: f.name, Servers: f.cfg.Servers, Watching: f.Store.Watching(), Stats: f.Stats(),
		Buckets: append(store.BucketNames(f.cfg.BucketPrefix), f.cfg.BucketPrefix+SchemasBucketSuffix)}
	if f.nc.IsConnected() {
		st.Connected = f.nc.ConnectedUrlRedacted()
	}
	return st
}

// Handler serves Status as JSON (sluiced mounts it at /v1/fleet, behind
// the admin token).
func (f *Fleet) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, `{"error":"method not allowed","code":"invalid_argument"}`, http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.Status())
	})
}

// Close drops the connection to the cluster.
func (f *Fleet) Close() {
	if f.nc != nil {
		f.nc.Close()
	}
}
