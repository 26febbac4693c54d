package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
	"github.com/sluice-ai/sluice/go-control/internal/store"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// Server timeouts and limits of the admin API.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 15 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 60 * time.Second
	HeaderSizeMax     = 16 << 10 // bytes
	// ShutdownTimeoutDefault bounds the graceful drain.
	ShutdownTimeoutDefault = 10 * time.Second
)

// Options configure a daemon.
type Options struct {
	ConfigPath      string
	Engine          string        // engine implementation, see engine.Available
	ShutdownTimeout time.Duration // 0: ShutdownTimeoutDefault
	Logger          *slog.Logger  // nil: text to stderr
	// Ready, if set, is called once the admin API accepts connections and
	// signals are being handled.
	Ready func(addr net.Addr)
	// Mount adds handlers (e.g. the schema registry) under path prefixes;
	// they sit behind the same token check.
	Mount map[string]http.Handler
	// Store, if set, holds the control state instead of the one named by
	// control.store (fleet mode passes its NATS store); Run closes it.
	Store store.Store
	// RegistryStore, if set, holds the schema registry instead of the
	// bolt file in the data dir (fleet mode shares it through NATS).
	RegistryStore registry.Store
	// WorkerCheckEvery is how often a failed worker is looked for; 0:
	// WorkerCheckEveryDefault.
	WorkerCheckEvery time.Duration
	// Fleet, if set, makes this appliance one of a fleet: an admin API
	// change is stored in the shared store first, and reaches the engine
	// (this one's too) only from there, through the fleet's loop.
	Fleet FleetLink
	// LoadFleet, if set (fleet mode), holds the other appliances' load for
	// GET /v1/load/fleet and the page's fleet view.
	LoadFleet *heatmap.Fleet
	// Collectors are added to /metrics (the fleet's revisions).
	Collectors []prometheus.Collector
	// Ingress, if set, feeds requests from outside (package jobs: JetStream
	// streams): started once the engine serves, drained before it.
	Ingress Ingress
}

// Daemon is one running sluiced.
type Daemon struct {
	opts       Options
	state      *state
	eng        engine.Engine
	engineName string
	reg        *registry.Registry
	regHandler http.Handler
	schemas    *schemaSync
	audits     auditLog
	refused    refusals // admin requests refused before a handler, by cause
	// tracer makes control operations spans; nil when not tracing.
	tracer trace.Tracer
}

// New loads the config and the stored overrides and creates the engine,
// without starting anything.
func New(opts Options) (*Daemon, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	file, err := config.Load(opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	st := opts.Store
	switch {
	case st != nil:
	case file.Control.Store == "embedded":
		st, err = store.OpenBolt(file.Control.DataDir)
		if err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: control.store %q needs its store passed in (sluiced connects to the fleet for \"nats\")", errs.ErrUnsupported, file.Control.Store)
	}
	o, err := loadOverrides(st)
	if err != nil {
		st.Close()
		return nil, err
	}
	eff := compose(file, o)
	if err := validate(eff); err != nil {
		st.Close()
		return nil, fmt.Errorf("%w\n(the file is good; a change made through the admin API and kept in %s conflicts with it)", err, file.Control.DataDir)
	}
	js, err := eff.JSON()
	if err != nil {
		st.Close()
		return nil, err
	}
	reg, regHandler, err := openRegistry(file.Control.DataDir, opts.RegistryStore)
	if err != nil {
		st.Close()
		return nil, err
	}
	eng, err := engine.Open(opts.Engine, js)
	if err != nil {
		st.Close()
		reg.Close()
		return nil, err
	}
	if opts.Engine == "fake" {
		log.Warn("running the fake engine: in-memory, serves no traffic (for tests only)")
	}
	warnAuth(log, eff)
	return &Daemon{
		opts:       opts,
		eng:        eng,
		engineName: opts.Engine,
		reg:        reg,
		regHandler: regHandler,
		schemas:    newSchemaSync(),
		state:      &state{path: opts.ConfigPath, log: log, eng: eng, st: st, file: file, eff: eff, started: time.Now(), link: opts.Fleet},
	}, nil
}

// warnAuth says at start-up what [auth] leaves open (docs/wire.md,
// "What the appliance checks").
func warnAuth(log *slog.Logger, c *config.Config) {
	if why := c.UnauthenticatedExposure(); why != "" {
		log.Warn("data plane unauthenticated", "why", why)
	}
	if c.Auth.Mode == "tenants" && len(c.Tenants) == 0 {
		log.Warn("auth.mode = \"tenants\" and no tenant is configured: every request and negotiation is refused (unauthenticated) until tenants are added")
	}
}

// Engine returns the engine the daemon drives (tests feed the Fake).
func (d *Daemon) Engine() engine.Engine { return d.eng }

// Reload re-reads the config file, as SIGHUP does. Fleet mode calls it when
// the fleet's shared control state changed; it is audited as who=fleet.
func (d *Daemon) Reload() (api.ReloadResult, error) {
	res, err := d.state.reload()
	d.auditAs("fleet", "reload", "reload", reloadWhat(res), err)
	d.traceChange(context.Background(), "fleet", "reload", "reload", reloadWhat(res), outcomeOf(err), err)
	return res, err
}

// RefreshSchemas re-reads the registry from its store and returns once the
// engine has the versions other writers (fleet appliances) added or
// retired.
func (d *Daemon) RefreshSchemas(ctx context.Context) error {
	if err := d.reg.Refresh(ctx); err != nil {
		return err
	}
	return d.schemas.flush(ctx)
}

// Handler is the admin API with auth, as served: unknown paths get the JSON
// error body, and changes to the registry are audited. Host, Origin and
// a write's Content-Type are checked first (guard.go).
func (d *Daemon) Handler() http.Handler {
	mux := d.routes()
	mux.Handle(RegistryPrefix+"/", d.auditRegistry(d.regHandler))
	for prefix, h := range d.opts.Mount {
		mux.Handle(prefix, h)
	}
	h := d.controlSpans(jsonMisses(mux))
	if d.opts.Fleet != nil {
		h = changeMiddleware(h) // fleet writes carry a change id
	} else {
		h = changeIDCheck(h) // unused on one host, but never accepted malformed
	}
	h = requireToken(d.state.eff.Control.AdminToken, &d.refused, h)
	return newGuard(d.state.eff.Control.AdminListen, &d.refused, h)
}

func (d *Daemon) notify(state string) {
	if err := sdNotify(state); err != nil {
		d.state.log.Warn("sd_notify", "err", err)
	}
}

func listen(addr string) (net.Listener, func(), error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		// A stale socket from a crash would block the bind; remove only a socket.
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSocket != 0 {
			os.Remove(path)
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: admin_listen: %w", errs.ErrIO, err)
		}
		if err := os.Chmod(path, 0o660); err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("%w: admin socket: %w", errs.ErrIO, err)
		}
		return ln, func() { os.Remove(path) }, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: admin_listen: %w", errs.ErrIO, err)
	}
	return ln, func() {}, nil
}

// Run starts the engine and serves until ctx ends or SIGTERM/SIGINT; SIGHUP
// reloads the config. Shutdown stops accepting admin requests, drains the
// engine, then closes the listener and the store.
func (d *Daemon) Run(ctx context.Context) (err error) {
	log := d.state.log
	defer func() {
		if cerr := errors.Join(d.state.st.Close(), d.reg.Close()); cerr != nil && err == nil {
			err = cerr
		}
	}()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	ln, cleanup, err := listen(d.state.eff.Control.AdminListen)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := d.eng.Start(); err != nil {
		ln.Close()
		return fmt.Errorf("engine start: %w", err)
	}
	// The pools' endpoints as changed through the API, as soon as it runs.
	d.restoreEndpoints()
	tracer, err := d.startTracing(context.Background())
	if err != nil {
		ln.Close()
		_ = d.eng.Stop(context.Background(), 0)
		return err
	}
	if tracer != nil {
		d.tracer = tracer.Tracer()
		defer func() {
			tctx, cancel := context.WithTimeout(context.Background(), TracingShutdownMax)
			defer cancel()
			if terr := tracer.Shutdown(tctx); terr != nil {
				log.Warn("tracing: final flush", "err", terr)
			}
		}()
	}
	if in := d.opts.Ingress; in != nil {
		if err := in.Start(d); err != nil {
			ln.Close()
			_ = d.eng.Stop(context.Background(), 0)
			return fmt.Errorf("jobs ingress: %w", err)
		}
	}
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    HeaderSizeMax,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnContext:       connContext,
	}
	// Schemas reach the engine's validator now and on every registry change.
	syncCtx, stopSync := context.WithCancel(context.Background())
	defer stopSync()
	cancelSub := d.reg.Subscribe(d.schemas.note)
	defer cancelSub()
	go d.schemas.run(syncCtx, d)
	go d.restoreTransforms()
	failed := d.watchWorkers(syncCtx, d.opts.WorkerCheckEvery)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("sluiced serving", "admin", ln.Addr().String(), "engine", d.engineName, "config", d.state.path)
	d.notify("READY=1\nSTATUS=serving")
	if d.opts.Ready != nil {
		d.opts.Ready(ln.Addr())
	}

	var serveErr, workerErr error
loop:
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				d.notify(reloadingState())
				res, rerr := d.state.reload() // a bad file leaves the running config
				d.auditAs("signal:SIGHUP", "reload", "reload", reloadWhat(res), rerr)
				d.traceChange(context.Background(), "signal:SIGHUP", "reload", "reload", reloadWhat(res), outcomeOf(rerr), rerr)
				status := "READY=1\nSTATUS=serving"
				if rerr != nil {
					status += "; last reload refused"
				}
				d.notify(status)
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			break loop
		case <-ctx.Done():
			log.Info("shutting down", "reason", ctx.Err())
			break loop
		case serveErr = <-served:
			log.Error("admin server failed", "err", serveErr)
			break loop
		case workerErr = <-failed:
			log.Error("a data-plane worker failed; draining the others and exiting non-zero so that the service manager restarts sluiced", "err", workerErr)
			d.notify("STATUS=a data-plane worker failed; restarting")
			break loop
		}
	}
	d.notify("STOPPING=1\nSTATUS=draining")
	timeout := d.opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = ShutdownTimeoutDefault
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Stop taking admin requests first so nothing changes during the drain.
	stopSync()
	herr := srv.Shutdown(sctx)
	drain := time.Duration(d.state.snapshot().Control.DrainMs) * time.Millisecond
	// The ingress finishes what it holds while the engine still answers.
	ierr := d.drainIngress(sctx, drain)
	log.Info("draining the engine", "drain_ms", drain.Milliseconds())
	eerr := d.eng.Stop(sctx, drain)
	if eerr != nil {
		log.Error("engine stop", "err", eerr)
	} else {
		log.Info("engine drained")
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(workerErr, serveErr, herr, ierr, eerr)
}
