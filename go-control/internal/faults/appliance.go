package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/fleet"
)

// appliance is one sluiced process in fleet mode with the Rust engine,
// on fixed loopback ports (kept across restarts so traffic and the
// checker keep finding it).
type appliance struct {
	name  string
	p     *proc
	admin string // http://127.0.0.1:port
	data  string // 127.0.0.1:port (UDP)
	http  *http.Client
}

// Fleet settings of the suite's appliances: short enough that a run of a
// few minutes sees many outcomes, and history enough that the checker
// sees every change the store ever took.
const (
	opTimeoutMs     = 2000
	checkIntervalMs = 100
	historyPerKey   = 4096
)

// applianceConfig is cfg/fleet.toml for appliance name: loopback ports,
// its own data dir, the suite's cluster, the null and echo models only
// (no ONNX Runtime needed) and a second local shard for routes to move to.
func applianceConfig(repo, dir, name string, dataPort, adminPort int, servers []string) (string, error) {
	b, err := os.ReadFile(filepath.Join(repo, "cfg/fleet.toml"))
	if err != nil {
		return "", err
	}
	s := string(b)
	for _, block := range []string{"[[routes]]\nname = \"mlp\"", "[[models]]\nname = \"mlp\""} {
		i := strings.Index(s, block)
		if i < 0 {
			return "", fmt.Errorf("cfg/fleet.toml has no %q block", block)
		}
		j := strings.Index(s[i:], "\n\n")
		if j < 0 {
			return "", fmt.Errorf("cfg/fleet.toml: %q block does not end", block)
		}
		s = s[:i] + s[i+j+2:]
	}
	q := make([]string, len(servers))
	for i, u := range servers {
		q[i] = fmt.Sprintf("%q", u)
	}
	for _, r := range [][2]string{
		{`listen = "127.0.0.1:7070"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, dataPort)},
		{`admin_listen = "127.0.0.1:7071"`, fmt.Sprintf(`admin_listen = "127.0.0.1:%d"`, adminPort)},
		{`data_dir = "../.cache/sluice-fleet-a"`, fmt.Sprintf(`data_dir = %q`, filepath.Join(dir, "data-"+name))},
		{`servers = ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4224"]`, "servers = [" + strings.Join(q, ", ") + "]"},
		{`name = "a"`, fmt.Sprintf(`name = %q`, name)},
		{`op_timeout_ms = 5000`, fmt.Sprintf(`op_timeout_ms = %d`, opTimeoutMs)},
		{`resync_interval_ms = 5000`, `resync_interval_ms = 1000`},
		{`check_interval_ms = 200`, fmt.Sprintf(`check_interval_ms = %d`, checkIntervalMs)},
		{`history = 1`, fmt.Sprintf(`history = %d`, historyPerKey)},
		{`library = "../.cache/onnxruntime/libonnxruntime.so.1.31.1"`, fmt.Sprintf(`library = %q`, filepath.Join(repo, ".cache/onnxruntime/libonnxruntime.so.1.31.1"))},
	} {
		if strings.Count(s, r[0]) != 1 {
			return "", fmt.Errorf("cfg/fleet.toml no longer has exactly one %q", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	s += "\n[[shards]]\nname = \"hbm2-batch\"\nlabels = { \"hardware.gpu.memory\" = \"hbm2\" }\nmax_concurrency = 4\nqueue_depth = 64\n"
	path := filepath.Join(dir, "fleet-"+name+".toml")
	return path, os.WriteFile(path, []byte(s), 0o600)
}

func newAppliance(repo, dir, bin, name string, dataPort, adminPort int, servers []string) (*appliance, error) {
	path, err := applianceConfig(repo, dir, name, dataPort, adminPort, servers)
	if err != nil {
		return nil, err
	}
	return &appliance{
		name:  name,
		p:     &proc{name: "sluiced-" + name, bin: bin, args: []string{"-config", path}, log: filepath.Join(dir, "sluiced-"+name+".log")},
		admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		data:  fmt.Sprintf("127.0.0.1:%d", dataPort),
		http:  &http.Client{Timeout: 10 * time.Second},
	}, nil
}

// waitServing waits until the admin API answers (the engine serves from
// then on).
func (a *appliance) waitServing(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	c := http.Client{Timeout: 500 * time.Millisecond}
	for {
		resp, err := c.Get(a.admin + "/v1/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if a.p.exitedOnItsOwn() {
			return fmt.Errorf("%s exited at start (see %s)", a.name, a.p.log)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not serving within %v (see %s)", a.name, within, a.p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// answer is an admin API call's result as the checker needs it.
type answer struct {
	status  int // 0: no HTTP answer
	body    string
	header  http.Header
	sent    bool // the request may have reached the appliance
	connErr string
}

func (a *appliance) call(ctx context.Context, method, path, key string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.admin+path, rd)
	if err != nil {
		return answer{connErr: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		// Refused connections never reached the appliance; anything else
		// (reset, timeout) may have.
		return answer{connErr: err.Error(), sent: !isConnRefused(err)}
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return answer{status: resp.StatusCode, body: string(out), header: resp.Header, sent: true}
}

func isConnRefused(err error) bool {
	return errors.Is(err, errConnRefused) || strings.Contains(err.Error(), "connection refused")
}

var errConnRefused = errors.New("connection refused")

// fleetStatus reads /v1/fleet with a short timeout.
func (a *appliance) fleetStatus(timeout time.Duration) (fleet.Status, error) {
	c := http.Client{Timeout: timeout}
	resp, err := c.Get(a.admin + "/v1/fleet")
	if err != nil {
		return fleet.Status{}, err
	}
	defer resp.Body.Close()
	var st fleet.Status
	if resp.StatusCode != 200 {
		return st, fmt.Errorf("GET /v1/fleet: %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func (a *appliance) getJSON(path string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(a.admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
