package attacks

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoToken is the demo tenant's bearer token (cfg/sluice.toml); the
// appliance listens on loopback only, where a published token is allowed.
const demoToken = "sluice-demo-token-0000"

func root(t *testing.T) string {
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// config is cfg/sluice.toml with ephemeral ports, the front door on
// (HTTP and gRPC) with short timers and a small connection cap, so each
// attack meets its limit within seconds, and the edits given (old, new
// line pairs).
func config(t *testing.T, dir string, edits ...string) string {
	b, err := os.ReadFile(filepath.Join(root(t), "cfg/sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	pairs := append([]string{
		`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`,
		`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-data"`, `data_dir = "data"`,
		`http_listen = ""`, `http_listen = "127.0.0.1:0"`,
		`grpc_listen = ""`, `grpc_listen = "127.0.0.1:0"`,
		// Whole lines: [io_uring] has tcp_ keys ending the same way.
		"\nhandshake_timeout_ms = 10000", "\nhandshake_timeout_ms = 1000",
		"\nidle_timeout_ms = 60000", "\nidle_timeout_ms = 2000",
		"\nheader_timeout_ms = 30000", "\nheader_timeout_ms = 1000",
		"\nbody_timeout_ms = 10000", "\nbody_timeout_ms = 1000",
		"\nwrite_timeout_ms = 30000", "\nwrite_timeout_ms = 1000",
		"\nconnections_max = 1024", "\nconnections_max = 128",
	}, edits...)
	for i := 0; i < len(pairs); i += 2 {
		if !strings.Contains(s, pairs[i]) {
			t.Fatalf("cfg/sluice.toml has no %q any more: update the attack rig", pairs[i])
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	s = strings.ReplaceAll(s, `"../models/`, `"`+root(t)+`/models/`)
	s = strings.ReplaceAll(s, `"../.cache/onnxruntime/`, `"`+root(t)+`/.cache/onnxruntime/`)
	p := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// appliance is one running sluiced.
type appliance struct {
	t     *testing.T
	cmd   *exec.Cmd
	admin string
	http  string
	grpc  string
	tcp   string
	udp   string
}

func start(t *testing.T, edits ...string) *appliance {
	dir := t.TempDir()
	cfg := config(t, dir, edits...)
	bin := os.Getenv("SLUICED")
	if bin == "" {
		bin = filepath.Join(root(t), ".cache/bin/sluiced")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run scripts/build-ffi.sh (or set SLUICED)", bin)
	}
	cmd := exec.Command(bin, "-config", cfg)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Getenv("SLUICE_ORT_LIB") == "" {
		cmd.Env = append(os.Environ(), "SLUICE_ORT_LIB="+root(t)+"/.cache/onnxruntime/libonnxruntime.so.1.31.1")
	}
	logf, err := os.Create(filepath.Join(dir, "sluiced.log"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "sluiced.log"))
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("sluiced log (end):\n%s", b)
		}
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`sluiced serving" admin=(\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	a := &appliance{t: t, cmd: cmd}
	select {
	case ad := <-addr:
		a.admin = "http://" + ad
	case <-time.After(60 * time.Second):
		t.Fatal("sluiced did not come up in 60 s")
	}
	var st struct {
		Engine struct {
			Listen    string `json:"listen"`
			TCPListen string `json:"tcp_listen"`
			Frontdoor struct {
				HTTP string `json:"http"`
				GRPC string `json:"grpc"`
			} `json:"frontdoor"`
		} `json:"engine"`
	}
	a.getJSON("/v1/status", &st)
	a.udp, a.tcp = st.Engine.Listen, st.Engine.TCPListen
	a.http, a.grpc = st.Engine.Frontdoor.HTTP, st.Engine.Frontdoor.GRPC
	if a.http == "" || a.grpc == "" {
		t.Fatalf("status names no front-door addresses: %+v", st)
	}
	return a
}

func (a *appliance) getJSON(path string, v any) {
	a.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(a.admin + path)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		a.t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		a.t.Fatalf("GET %s: %v", path, err)
	}
}

// frontdoorStats reads the front door's counters.
func (a *appliance) frontdoorStats() map[string]uint64 {
	var st struct {
		Engine struct {
			Frontdoor struct {
				Stats map[string]uint64 `json:"stats"`
			} `json:"frontdoor"`
		} `json:"engine"`
	}
	a.getJSON("/v1/status", &st)
	return st.Engine.Frontdoor.Stats
}

// rssBytes is the daemon's resident set (VmRSS).
func (a *appliance) rssBytes() uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", a.cmd.Process.Pid))
	if err != nil {
		a.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	a.t.Fatal("no VmRSS")
	return 0
}

// latencies summarises one run of legitimate requests.
type latencies struct {
	n, errs  int
	p50, p99 time.Duration
	firstErr error
}

func summarise(d []time.Duration, errs int, first error) latencies {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	l := latencies{n: len(d) + errs, errs: errs, firstErr: first}
	if len(d) > 0 {
		l.p50 = d[len(d)/2]
		l.p99 = d[min(len(d)-1, len(d)*99/100)]
	}
	return l
}

// report is one attack's line in the closing table.
type report struct {
	name          string
	base, during  latencies
	rssBefore     uint64
	rssAfter      uint64
	closedRefused string
}

func (r report) String() string {
	ratio := "n/a"
	if r.base.p99 > 0 {
		ratio = fmt.Sprintf("%.2f", float64(r.during.p99)/float64(r.base.p99))
	}
	return fmt.Sprintf("%-34s legit p99 %8v (alone %8v, x%s), %d/%d answered; RSS %5.1f -> %5.1f MiB; %s",
		r.name, r.during.p99.Round(time.Microsecond), r.base.p99.Round(time.Microsecond), ratio,
		r.during.n-r.during.errs, r.during.n, float64(r.rssBefore)/(1<<20), float64(r.rssAfter)/(1<<20), r.closedRefused)
}

// delta says how the named counters moved.
func delta(before, after map[string]uint64, names ...string) string {
	var parts []string
	for _, n := range names {
		if d := after[n] - before[n]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s +%d", n, d))
		}
	}
	if len(parts) == 0 {
		return "nothing closed or refused"
	}
	return strings.Join(parts, ", ")
}
