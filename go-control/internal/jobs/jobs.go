// Package jobs is sluiced's durable asynchronous ingress: it consumes
// JetStream streams with durable pull consumers (explicit ack, one
// consumer shared by a fleet), turns each message into a Sluice request,
// sends it to this appliance's own data plane over loopback (the same path
// as any client: auth, validation, routes, shards, admission, models,
// stats), and stores the answer: a result on the reply or results subject,
// or a dead letter. The message is acked only once that is stored
// (publish ack received); retryable failures are nak'ed with a delay.
// Results carry Nats-Msg-Id = "sluice:" + STREAM:SEQUENCE, so a redelivered
// message adds no second result within the stream's duplicate window.
// docs/jobs.md is the user's guide.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// ReconnectWait spaces reconnect attempts to the cluster.
const ReconnectWait = 250 * time.Millisecond

// getenv is how tenant keys written "env:VAR" are read.
var getenv = os.Getenv

// Ingress is the JetStream ingress of one sluiced.
type Ingress struct {
	cfg   config.Jobs
	fleet config.Fleet // only the connection settings are used
	log   *slog.Logger

	host    daemon.IngressHost
	nc      *nats.Conn
	js      jetstream.JetStream
	clients *clients
	openai  *openAI       // jobs for models served by backends (openai.go)
	slots   chan struct{} // jobs.concurrency: requests in the data plane at once
	streams []*streamRunner

	draining atomic.Bool
	stop     chan struct{} // closed by Drain: no more fetches
	loops    sync.WaitGroup
	held     sync.WaitGroup // messages taken and not yet settled
}

var _ daemon.Ingress = (*Ingress)(nil)

// New prepares the ingress of cfg's [jobs] streams; nothing connects
// before Start. cfg must be valid (config.Load checked it).
func New(cfg *config.Config, log *slog.Logger) (*Ingress, error) {
	if len(cfg.Jobs.Streams) == 0 {
		return nil, fmt.Errorf("%w: no [[jobs.streams]] configured", errs.ErrInvalidConfig)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	in := &Ingress{cfg: cfg.Jobs, fleet: cfg.Fleet, log: log.With("part", "jobs"),
		slots: make(chan struct{}, cfg.Jobs.Concurrency), stop: make(chan struct{}), openai: newOpenAI(cfg)}
	for _, s := range cfg.Jobs.Streams {
		in.streams = append(in.streams, newStreamRunner(in, s))
	}
	return in, nil
}

// Start connects to the cluster and starts one fetch loop per stream. It
// does not wait for the cluster: a loop that cannot reach its stream yet
// retries, and says so in Status.
func (in *Ingress) Start(h daemon.IngressHost) error {
	in.host = h
	addr := in.cfg.DataAddress
	if addr == "" {
		l, err := h.EngineListen()
		if err != nil {
			return fmt.Errorf("the engine's listen address: %w", err)
		}
		if addr, err = loopback(l); err != nil {
			return err
		}
	}
	in.clients = newClients(addr, in.cfg)
	in.openai.host = h
	name := in.fleet.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	opts := []nats.Option{
		nats.Name("sluiced jobs " + name),
		nats.Timeout(time.Duration(in.fleet.ConnectTimeoutMs) * time.Millisecond),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(ReconnectWait),
		// A cluster that is down at start is waited for, not fatal.
		nats.RetryOnFailedConnect(true),
		nats.ReconnectHandler(func(c *nats.Conn) {
			in.log.Info("jobs reconnected", "server", c.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				in.log.Warn("jobs disconnected; reconnecting", "err", err)
			}
		}),
	}
	if in.fleet.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(in.fleet.CredsFile))
	}
	nc, err := nats.Connect(strings.Join(in.fleet.Servers, ","), opts...)
	if err != nil {
		return fmt.Errorf("%w: jobs: connect %v: %w", errs.ErrIO, in.fleet.Servers, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%w: jobs: jetstream: %w", errs.ErrIO, err)
	}
	in.nc, in.js = nc, js
	for _, s := range in.streams {
		in.loops.Add(1)
		go s.run()
	}
	in.log.Info("jobs ingress started", "streams", len(in.streams), "data", addr, "openai", in.openai.address())
	return nil
}

// loopback turns the engine's bound address into one to send to: an
// unspecified IP (0.0.0.0, ::) becomes the loopback of its family.
func loopback(listen string) (string, error) {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return "", fmt.Errorf("%w: the engine listens on %q, not an IP:port (set jobs.data_address)", errs.ErrInvalidConfig, listen)
	}
	ip := ap.Addr()
	if ip.IsUnspecified() {
		ip = netip.IPv6Loopback()
		if ap.Addr().Is4() {
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(ap.Port())), nil
}

// Drain stops fetching, lets every message it holds finish (its result or
// dead letter stored and acked, or nak'ed), flushes the acks and closes
// the connection. If ctx ends first the rest stay unacked and JetStream
// redelivers them after ack_wait_ms, to this appliance or another.
func (in *Ingress) Drain(ctx context.Context) error {
	if in.draining.Swap(true) {
		return nil
	}
	close(in.stop)
	done := make(chan struct{})
	go func() {
		in.loops.Wait()
		in.held.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("%w: jobs drain: %d messages still held; JetStream redelivers them after ack_wait_ms", errs.ErrTimeout, in.inFlight())
	}
	if in.nc != nil {
		if ferr := in.nc.FlushTimeout(time.Second); ferr != nil && err == nil && !errors.Is(ferr, nats.ErrConnectionClosed) {
			err = fmt.Errorf("%w: jobs: flushing acks: %w", errs.ErrIO, ferr)
		}
		in.nc.Close()
	}
	if in.clients != nil {
		in.clients.close()
	}
	in.openai.close()
	return err
}

func (in *Ingress) inFlight() int {
	n := 0
	for _, s := range in.streams {
		n += int(s.inflight.Load())
	}
	return n
}

// Status describes every stream (GET /v1/jobs).
func (in *Ingress) Status() api.JobsDoc {
	doc := api.JobsDoc{Enabled: true, Draining: in.draining.Load(), Streams: []api.JobStreamDoc{}}
	if in.nc != nil && in.nc.IsConnected() {
		doc.Connected = in.nc.ConnectedUrlRedacted()
	}
	for _, s := range in.streams {
		doc.Streams = append(doc.Streams, s.status())
	}
	return doc
}
