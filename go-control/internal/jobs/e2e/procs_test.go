//go:build jobs_e2e

// Package e2e runs the JetStream ingress end to end with real processes:
// nats-server (one node, or a 3-node cluster), sluiced with the Rust
// engine and the bundled models, and the seed's own publishing program.
// Build tag jobs_e2e (scripts/test.sh runs it as its own stage):
//
//	eval "$(scripts/build-ffi.sh)"
//	cd go-control && go test -tags jobs_e2e ./internal/jobs/e2e/ -v
//
// Binaries: .cache/bin/sluiced and .cache/bin/nats-server (or SLUICED,
// NATS_SERVER); the reference is onnxruntime-python from
// .cache/python-client (or SLUICE_PYTHON). A missing one fails with a hint.
package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func binary(t *testing.T, env, rel, hint string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(repoRoot(t), rel)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s missing (%v): %s, or set %s", p, err, hint, env)
	}
	return p
}

// freePort finds a loopback port nobody holds now (nats-server cluster
// routes must be named before the nodes start).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// proc is one child process, its output kept in a file (shown when the
// test fails) and watched for a line.
type proc struct {
	t    *testing.T
	name string
	argv []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newProc(t *testing.T, dir, name string, argv ...string) *proc {
	p := &proc{t: t, name: name, argv: argv, log: filepath.Join(dir, name+".log")}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("---- %s (last lines of %s)\n%s", name, p.log, b)
		}
	})
	return p
}

// start runs the process; watch, if set, sees every output line.
func (p *proc) start(watch func(string)) {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "==== start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	// Killed with the test binary, even when a test panics.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StderrPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stdout = f
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if watch != nil {
				watch(line)
			}
		}
		_ = cmd.Wait()
		fmt.Fprintf(f, "==== exit %s: %v\n", time.Now().Format(time.RFC3339Nano), cmd.ProcessState)
		f.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
}

// signal sends sig and waits up to wait for the exit (then kills).
func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (p *proc) kill() { p.signal(syscall.SIGKILL, 10*time.Second) }

// natsNode is one nats-server with JetStream; a cluster's nodes route to
// each other. A restart keeps its ports and its store.
type natsNode struct {
	*proc
	port int
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// startNATS runs size nodes (1, or 3 for a cluster) and waits until
// JetStream answers on each.
func startNATS(t *testing.T, dir string, size int) []*natsNode {
	t.Helper()
	bin := binary(t, "NATS_SERVER", ".cache/bin/nats-server", "scripts/setup.sh installs it")
	var nodes []*natsNode
	ports, routes := make([]int, size), make([]int, size)
	for i := range size {
		ports[i], routes[i] = freePort(t), freePort(t)
	}
	for i := range size {
		conf := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q }\n", i, ports[i], filepath.Join(dir, fmt.Sprintf("js%d", i)))
		if size > 1 {
			var rs []string
			for j := range size {
				if j != i {
					rs = append(rs, fmt.Sprintf("nats://127.0.0.1:%d", routes[j]))
				}
			}
			conf += fmt.Sprintf("cluster { name: jobs, listen: 127.0.0.1:%d, routes: [%s] }\n", routes[i], strings.Join(rs, ", "))
		}
		path := filepath.Join(dir, fmt.Sprintf("n%d.conf", i))
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		n := &natsNode{proc: newProc(t, dir, fmt.Sprintf("nats%d", i), bin, "-c", path), port: ports[i]}
		n.start(nil)
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		waitHTTP(t, n, fmt.Sprintf("127.0.0.1:%d", n.port))
	}
	return nodes
}

// waitHTTP waits until a TCP port accepts (nats-server's client port).
func waitHTTP(t *testing.T, p *natsNode, addr string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s does not accept on %s", p.name, addr)
}

// appliance is one sluiced process.
type appliance struct {
	*proc
	cfg string

	mu    sync.Mutex
	admin string
}

// jobsConfig is cfg/jobs.toml made to run here: ephemeral ports, absolute
// paths, its own data dir, the given servers, then edits (old, new pairs
// of whole lines, each of which must be found).
func jobsConfig(t *testing.T, dir, name string, servers []string, core int, edits ...string) string {
	t.Helper()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "cfg/jobs.toml"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(servers))
	for i, s := range servers {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	pairs := append([]string{
		"workers = [1]", fmt.Sprintf("workers = [%d]", core),
		`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`,
		`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-jobs-data"`, fmt.Sprintf("data_dir = %q", filepath.Join(dir, name+"-data")),
		`servers = ["nats://127.0.0.1:4222"]`, fmt.Sprintf("servers = [%s]", strings.Join(quoted, ", ")),
		`library = "../.cache/onnxruntime/libonnxruntime.so.1.31.1"`, fmt.Sprintf("library = %q", ortLib(t)),
		`path = "../models/mlp.onnx"`, fmt.Sprintf("path = %q", filepath.Join(root, "models/mlp.onnx")),
		`"../models/mlp_formal.onnx_adapter"`, fmt.Sprintf("%q", filepath.Join(root, "models/mlp_formal.onnx_adapter")),
	}, edits...)
	src := string(b)
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(src, pairs[i]) {
			t.Fatalf("cfg/jobs.toml has no %q any more: update the test", pairs[i])
		}
		src = strings.Replace(src, pairs[i], pairs[i+1], 1)
	}
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func ortLib(t *testing.T) string {
	if p := os.Getenv("SLUICE_ORT_LIB"); p != "" {
		return p
	}
	return filepath.Join(repoRoot(t), ".cache/onnxruntime/libonnxruntime.so.1.31.1")
}

func newAppliance(t *testing.T, dir, name, cfg string) *appliance {
	bin := binary(t, "SLUICED", ".cache/bin/sluiced", "run `eval \"$(scripts/build-ffi.sh)\"` first")
	a := &appliance{proc: newProc(t, dir, name, bin, "-config", cfg), cfg: cfg}
	return a
}

// start runs sluiced and waits until it serves (its admin address).
func (a *appliance) start() {
	a.t.Helper()
	ready := make(chan string, 1)
	a.proc.start(func(line string) {
		if _, rest, ok := strings.Cut(line, "sluiced serving\" admin="); ok {
			select {
			case ready <- strings.Fields(rest)[0]:
			default:
			}
		}
	})
	select {
	case addr := <-ready:
		a.mu.Lock()
		a.admin = addr
		a.mu.Unlock()
	case <-time.After(60 * time.Second):
		a.t.Fatalf("%s did not serve within 60 s", a.name)
	}
}

// jobs reads GET /v1/jobs.
func (a *appliance) jobs() (jobsDoc, error) {
	a.mu.Lock()
	addr := a.admin
	a.mu.Unlock()
	var doc jobsDoc
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/v1/jobs")
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	return doc, json.NewDecoder(resp.Body).Decode(&doc)
}

// jobsDoc is the part of GET /v1/jobs the tests read.
type jobsDoc struct {
	Connected string `json:"connected"`
	Streams   []struct {
		State    string            `json:"state"`
		Lag      uint64            `json:"lag"`
		InFlight int               `json:"in_flight"`
		Counters map[string]any    `json:"counters"`
		Codes    map[string]uint64 `json:"-"`
	} `json:"streams"`
}

// waitConsuming waits until every stream of a reads "consuming".
func (a *appliance) waitConsuming(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if doc, err := a.jobs(); err == nil && len(doc.Streams) > 0 && doc.Streams[0].State == "consuming" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	doc, err := a.jobs()
	t.Fatalf("%s never consuming: %+v %v", a.name, doc, err)
}

// holding waits up to wait for a to hold messages (a crash then lands
// mid-batch) and says how many it held when last asked.
func (a *appliance) holding(wait time.Duration) int {
	deadline := time.Now().Add(wait)
	n := 0
	for time.Now().Before(deadline) {
		if doc, err := a.jobs(); err == nil && len(doc.Streams) > 0 {
			if n = doc.Streams[0].InFlight; n > 0 {
				return n
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return n
}
