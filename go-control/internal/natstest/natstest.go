// Package natstest runs real nats-server nodes with JetStream in-process
// for the tests of the fleet packages: one server, or a cluster whose nodes
// can be stopped and started again on the same store.
package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReadyWait bounds the wait for a node or the cluster (a failure bound).
const ReadyWait = 30 * time.Second

// Cluster is n real nats-server nodes (n == 1: a single server).
type Cluster struct {
	t     testing.TB
	opts  []*server.Options
	Nodes []*server.Server // nil while stopped
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs n nodes and waits until JetStream answers.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Nodes: make([]*server.Server, n)}
	routePorts := make([]int, n)
	var routes []string
	for i := range routePorts {
		routePorts[i] = freePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]))
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: freePort(t),
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
		}
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "sluice-test", Host: "127.0.0.1", Port: routePorts[i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts = append(c.opts, o)
	}
	for i := range n {
		c.StartNode(i)
	}
	t.Cleanup(func() {
		for i := range c.Nodes {
			if c.Nodes[i] != nil {
				c.Nodes[i].Shutdown()
			}
		}
	})
	c.WaitJetStream()
	return c
}

// WaitJetStream waits until JetStream answers (the meta group has a leader).
func (c *Cluster) WaitJetStream() {
	c.t.Helper()
	nc, js := c.Connect()
	defer nc.Close()
	deadline := time.Now().Add(ReadyWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("JetStream not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URLs lists every node's client URL (stopped ones too).
func (c *Cluster) URLs() []string {
	var out []string
	for _, o := range c.opts {
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return out
}

// Connect dials the cluster (all URLs) as a fleet appliance would.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	c.t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectBufSize(-1), nats.PingInterval(500 * time.Millisecond), nats.MaxPingsOutstanding(2)}, opts...)
	nc, err := nats.Connect(strings.Join(c.URLs(), ","), opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		c.t.Fatal(err)
	}
	return nc, js
}

// StartNode starts node i (again, on its store).
func (c *Cluster) StartNode(i int) {
	c.t.Helper()
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(ReadyWait) {
		c.t.Fatalf("nats node %d did not start", i)
	}
	c.Nodes[i] = s
}

// StopNode shuts node i down.
func (c *Cluster) StopNode(i int) {
	if c.Nodes[i] == nil {
		return
	}
	c.Nodes[i].Shutdown()
	c.Nodes[i].WaitForShutdown()
	c.Nodes[i] = nil
}

// StreamLeader returns the index of stream's leader node, waiting for one.
func (c *Cluster) StreamLeader(stream string) int {
	c.t.Helper()
	nc, js := c.Connect()
	defer nc.Close()
	deadline := time.Now().Add(ReadyWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := js.Stream(ctx, stream)
		cancel()
		if err == nil && s.CachedInfo().Cluster != nil {
			for i, o := range c.opts {
				if o.ServerName == s.CachedInfo().Cluster.Leader && c.Nodes[i] != nil {
					return i
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no leader for stream %s: %v", stream, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
