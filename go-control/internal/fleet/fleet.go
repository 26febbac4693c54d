// Package fleet runs a sluiced as one appliance of a fleet: the control
// state (routes, tenants, models, aliases, peers) and the schema registry
// live in NATS JetStream KV buckets shared by every appliance, and each
// appliance serves what the buckets hold through the same path as a
// SIGHUP (daemon reload and registry refresh: the effective config is
// recomposed, validated whole, and sent to the engine in one Apply). A
// change made through this appliance's admin API is stored first and
// reaches this engine the same way, from the store (save before serve).
package fleet

import (
	"context"
	"fmt"
	"log/slog"
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

// Connection settings: a server that stops answering (SIGSTOP, a dead
// host) is given up after two missed pings or two failed flushes, and
// nothing is buffered while reconnecting, so a write either leaves or is
// refused at once (never sent late, after its caller was told it failed).
const (
	ReconnectWait  = 250 * time.Millisecond
	PingInterval   = 500 * time.Millisecond
	PingsOutMax    = 2
	flushFailsMax  = 2
	flushTimeoutLo = 250 * time.Millisecond
)

// SchemasBucketSuffix names the registry's bucket: PREFIX_schemas.
const SchemasBucketSuffix = "_schemas"

// Target is what the fleet drives: a daemon.
type Target interface {
	ReloadFrom(v *store.View) (api.ReloadResult, error)
	RefreshSchemas(ctx context.Context) error
}

var _ Target = (*daemon.Daemon)(nil)
var _ daemon.FleetLink = (*Fleet)(nil)

// Fleet is this appliance's link to the cluster.
type Fleet struct {
	cfg      config.Fleet
	name     string
	log      *slog.Logger
	nc       *nats.Conn
	Store    *store.NATS      // control state; pass as daemon.Options.Store
	Registry *natsstore.Store // schema registry; pass as daemon.Options.RegistryStore
	schemas  string           // the registry's bucket name
	stop     context.CancelFunc

	ctrlDirty   chan struct{}
	schemaDirty chan struct{}
	reconnected chan struct{}

	mu       sync.Mutex
	stats    Stats
	served   map[string]served // by bucket
	servedCh chan struct{}     // closed (and replaced) when served moves
}

type served struct {
	rev    uint64
	digest string
	at     time.Time
}

// Stats count what the fleet loop did.
type Stats struct {
	ControlResyncs   uint64 `json:"control_resyncs"` // applies that succeeded (changed something or not)
	ControlRefused   uint64 `json:"control_refused"` // the shared state is not valid here (yet)
	SchemaRefreshes  uint64 `json:"schema_refreshes"`
	SchemaFailures   uint64 `json:"schema_failures"`
	Reconnects       uint64 `json:"reconnects"`
	ForcedReconnects uint64 `json:"forced_reconnects"` // the server in use stopped answering
	LastControlError string `json:"last_control_error,omitempty"`
}

// Connect dials the cluster, opens (creating if needed) the buckets and
// fills their mirrors, which then follow the buckets until Close.
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
		cfg: cfg, name: name, log: log.With("fleet", name), schemas: cfg.BucketPrefix + SchemasBucketSuffix,
		ctrlDirty: make(chan struct{}, 1), schemaDirty: make(chan struct{}, 1), reconnected: make(chan struct{}, 1),
		served: map[string]served{}, servedCh: make(chan struct{}),
	}
	opts := []nats.Option{
		nats.Name("sluiced " + name),
		nats.Timeout(time.Duration(cfg.ConnectTimeoutMs) * time.Millisecond),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		nats.ReconnectBufSize(-1),
		nats.PingInterval(PingInterval),
		nats.MaxPingsOutstanding(PingsOutMax),
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
	if err := f.open(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return f, nil
}

func (f *Fleet) open(ctx context.Context) error {
	js, err := jetstream.New(f.nc)
	if err != nil {
		return fmt.Errorf("%w: fleet: jetstream: %w", errs.ErrIO, err)
	}
	cfg := f.cfg
	opTimeout := time.Duration(cfg.OpTimeoutMs) * time.Millisecond
	check := time.Duration(cfg.CheckIntervalMs) * time.Millisecond
	f.Store, err = store.OpenNATS(ctx, js, store.NATSOptions{BucketPrefix: cfg.BucketPrefix, Replicas: cfg.Replicas,
		History: cfg.History, OpTimeout: opTimeout, CheckInterval: check, Log: f.log})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	f.Registry, err = natsstore.OpenWith(ctx, js, f.schemas, natsstore.Options{Replicas: cfg.Replicas,
		History: cfg.History, OpTimeout: opTimeout, CheckInterval: check})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	bg, stop := context.WithCancel(context.Background())
	if err := f.Store.Start(bg, f.markControl); err != nil {
		stop()
		f.Registry.Close()
		return fmt.Errorf("fleet: %w", err)
	}
	if err := f.Registry.Watch(bg, f.markSchemas); err != nil {
		stop()
		f.Registry.Close()
		return fmt.Errorf("fleet: %w", err)
	}
	f.stop = stop
	go f.keepConnected(bg)
	return nil
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

// keepConnected gives up a server that stopped answering (a stopped
// process keeps its sockets open, so only missed answers tell) sooner than
// the ping timeout would, and reconnects to another.
func (f *Fleet) keepConnected(ctx context.Context) {
	interval := max(time.Duration(f.cfg.CheckIntervalMs)*time.Millisecond, flushTimeoutLo)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !f.nc.IsConnected() {
			fails = 0
			continue
		}
		if err := f.nc.FlushTimeout(interval); err != nil {
			fails++
		} else {
			fails = 0
		}
		if fails >= flushFailsMax {
			f.log.Warn("the fleet server in use does not answer; reconnecting to another", "server", f.nc.ConnectedUrlRedacted())
			f.mu.Lock()
			f.stats.ForcedReconnects++
			f.mu.Unlock()
			_ = f.nc.ForceReconnect()
			fails = 0
		}
	}
}

// Run serves the fleet's state on t until ctx ends: once at start (to
// catch what changed between loading and now), after every new snapshot of
// a bucket, after a reconnect, and every resync_interval_ms. Changes heard
// within settle_ms are applied together. The control state and the schemas
// have a loop each: a registration that waits on the store (it holds the
// registry) never holds up a route change, nor the other way round.
func (f *Fleet) Run(ctx context.Context, t Target) error {
	var wg sync.WaitGroup
	wg.Go(func() { f.loop(ctx, f.ctrlDirty, func() { f.applyControl(t) }) })
	wg.Go(func() { f.loop(ctx, f.schemaDirty, func() { f.applySchemas(ctx, t) }) })
	tick := time.NewTicker(time.Duration(f.cfg.ResyncIntervalMs) * time.Millisecond)
	defer tick.Stop()
	f.markControl()
	f.markSchemas()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case <-tick.C:
		case <-f.reconnected:
			f.mu.Lock()
			f.stats.Reconnects++
			f.mu.Unlock()
		}
		f.markControl()
		f.markSchemas()
	}
}

// loop runs apply after each signal on dirty, settle_ms later.
func (f *Fleet) loop(ctx context.Context, dirty chan struct{}, apply func()) {
	settle := time.Duration(f.cfg.SettleMs) * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-dirty:
		}
		if settle > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(settle):
			}
		}
		take(dirty) // what came during the settle is in this round
		apply()
	}
}

// applySchemas refreshes the registry from its mirror and records the
// revision served once the engine has it.
func (f *Fleet) applySchemas(ctx context.Context, t Target) {
	snap := f.Registry.Bucket().Snapshot()
	rctx, cancel := context.WithTimeout(ctx, time.Duration(f.cfg.OpTimeoutMs)*time.Millisecond)
	err := t.RefreshSchemas(rctx)
	cancel()
	f.mu.Lock()
	if err != nil {
		f.stats.SchemaFailures++
	} else {
		f.stats.SchemaRefreshes++
	}
	f.mu.Unlock()
	if err != nil {
		f.log.Warn("schema refresh from the fleet failed; retrying on the next change or interval", "err", err)
		return
	}
	if snap != nil {
		// The registry read a snapshot at least this new.
		f.setServed(map[string]uint64{f.schemas: snap.Revision}, map[string]string{f.schemas: snap.Digest()})
	}
}

// applyControl serves the control buckets' snapshots (one consistent
// state per bucket) and records the revisions served.
func (f *Fleet) applyControl(t Target) {
	view, err := f.Store.View()
	if err == nil {
		_, err = t.ReloadFrom(view) // logs its own outcome; a refusal leaves the running config whole
	}
	f.mu.Lock()
	if err != nil {
		f.stats.ControlRefused++
		f.stats.LastControlError = err.Error()
	} else {
		f.stats.ControlResyncs++
		f.stats.LastControlError = ""
	}
	f.mu.Unlock()
	if err == nil {
		f.setServed(view.Revisions(), view.Digests())
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

func (f *Fleet) setServed(revs map[string]uint64, digests map[string]string) {
	f.mu.Lock()
	now := time.Now()
	for b, r := range revs {
		// at is when this revision began to be served: a resync that finds
		// nothing new leaves it.
		if old, ok := f.served[b]; !ok || r > old.rev {
			f.served[b] = served{rev: r, digest: digests[b], at: now}
		}
	}
	close(f.servedCh)
	f.servedCh = make(chan struct{})
	f.mu.Unlock()
}

// View implements daemon.FleetLink.
func (f *Fleet) View() (*store.View, error) { return f.Store.View() }

// Commit implements daemon.FleetLink.
func (f *Fleet) Commit(ctx context.Context, view *store.View, changeID string, ops ...store.Op) (store.Committed, error) {
	return f.Store.Commit(ctx, view, changeID, ops...)
}

// WaitServed implements daemon.FleetLink.
func (f *Fleet) WaitServed(ctx context.Context, bucket string, rev uint64) bool {
	for {
		f.mu.Lock()
		ok, ch := f.served[bucket].rev >= rev, f.servedCh
		f.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// Conn is the fleet's NATS connection (the heatmap shares load on it).
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Name is this appliance's name in the fleet.
func (f *Fleet) Name() string { return f.name }

// Close stops the mirrors and drops the connection to the cluster.
func (f *Fleet) Close() {
	if f.stop != nil {
		f.stop()
	}
	if f.Registry != nil {
		f.Registry.Close()
	}
	if f.nc != nil {
		f.nc.Close()
	}
}
