package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCluster is three real nats-server processes on loopback.
type natsCluster struct {
	nodes    []*proc
	clients  []int
	monitors []int
	nc       *nats.Conn // the suite's own link (leaders, the final read)
	js       jetstream.JetStream
}

func startCluster(ctx context.Context, bin, dir string) (*natsCluster, error) {
	const n = 3
	ports, err := freePorts(3*n, false)
	if err != nil {
		return nil, err
	}
	c := &natsCluster{clients: ports[:n], monitors: ports[n : 2*n]}
	routes := ports[2*n:]
	var routeURLs []string
	for _, p := range routes {
		routeURLs = append(routeURLs, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		c.nodes = append(c.nodes, &proc{
			name: "nats-" + name, bin: bin, log: filepath.Join(dir, "nats-"+name+".log"),
			args: []string{"-a", "127.0.0.1", "-p", fmt.Sprint(c.clients[i]), "-m", fmt.Sprint(c.monitors[i]),
				"-n", name, "-js", "-sd", filepath.Join(dir, name), "--cluster_name", "sluice-faults",
				"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", routes[i]), "--routes", strings.Join(routeURLs, ",")},
		})
	}
	for _, p := range c.nodes {
		if err := p.start(); err != nil {
			c.close()
			return nil, err
		}
	}
	c.nc, err = nats.Connect(strings.Join(c.urls(), ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.PingInterval(500*time.Millisecond), nats.MaxPingsOutstanding(2))
	if err != nil {
		c.close()
		return nil, err
	}
	c.js, _ = jetstream.New(c.nc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := c.js.AccountInfo(actx)
		cancel()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.close()
			return nil, fmt.Errorf("JetStream cluster not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *natsCluster) urls() []string {
	var out []string
	for _, p := range c.clients {
		out = append(out, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	return out
}

func (c *natsCluster) close() {
	if c.nc != nil {
		c.nc.Close()
	}
	for _, p := range c.nodes {
		p.cont()
		p.kill()
	}
}

// index of node name ("n1" -> 1), -1 if unknown.
func nodeIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "n%d", &i); err != nil || i < 0 || i > 2 {
		return -1
	}
	return i
}

// streamLeader returns the node leading stream, -1 if none answers now.
func (c *natsCluster) streamLeader(ctx context.Context, stream string) int {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil || s.CachedInfo().Cluster == nil {
		return -1
	}
	return nodeIndex(s.CachedInfo().Cluster.Leader)
}

// metaLeader returns the JetStream meta leader, asked of a running node's
// monitoring endpoint; -1 if none answers.
func (c *natsCluster) metaLeader() int {
	client := http.Client{Timeout: 500 * time.Millisecond}
	for i, p := range c.nodes {
		if !p.running() {
			continue
		}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", c.monitors[i]))
		if err != nil {
			continue
		}
		var v struct {
			Meta struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err == nil && v.Meta.Leader != "" {
			return nodeIndex(v.Meta.Leader)
		}
	}
	return -1
}
