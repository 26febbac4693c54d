// Command jobsbench measures the Sluice JetStream ingress (sluiced's
// [jobs]) against a plain Go JetStream worker running the same model
// in-process with onnxruntime_go (worker.go), in one run, on one
// nats-server (file storage, as the seed's stream):
//
//	jobsbench -root REPO           run everything (perf/jobs.sh does)
//	jobsbench -worker -fetch N ... the baseline worker (started by the run)
//
// For each system and fetch size (1 and 32 messages per pull request) the
// stream is made afresh, the system started, 200 requests warm it up, then
// a closed loop keeps W requests outstanding (W = 1: the path's latency;
// W = 128: throughput under load). Latency is publish → result stored:
// from just before the request's publish to the result's stored timestamp
// (JetStream's, same host clock). Throughput is requests over the time
// from the first publish to the last result stored.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	worker := flag.Bool("worker", false, "run the baseline worker")
	server := flag.String("server", "", "NATS URL (worker)")
	fetch := flag.Int("fetch", 1, "messages per fetch (worker)")
	root := flag.String("root", ".", "repository root")
	lib := flag.String("ort", "", "libonnxruntime path (default .cache/onnxruntime/libonnxruntime.so.1.31.1)")
	n := flag.Int("n", 4000, "requests per loaded run (W=128)")
	n1 := flag.Int("n1", 600, "requests per W=1 run")
	out := flag.String("out", "", "write the results as JSON here too")
	flag.Parse()
	if *lib == "" {
		*lib = filepath.Join(*root, ".cache/onnxruntime/libonnxruntime.so.1.31.1")
	}
	if *worker {
		if err := runWorker(*server, filepath.Join(*root, "models/mlp.onnx"), *lib, *fetch); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := bench(*root, *lib, *n, *n1, *out); err != nil {
		log.Fatal(err)
	}
}

// Result is one measured run.
type Result struct {
	System  string  `json:"system"` // "sluice" or "go-worker"
	Fetch   int     `json:"fetch"`
	Window  int     `json:"window"`
	N       int     `json:"n"`
	MsgsS   float64 `json:"msgs_per_s"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
	MeanUs  float64 `json:"mean_us"`
	Missing int     `json:"missing"`
}

func bench(root, lib string, n, n1 int, outPath string) error {
	dir, err := os.MkdirTemp("", "jobsbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port := 14500 + rand.Intn(400)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	srv := exec.Command(filepath.Join(root, ".cache/bin/nats-server"), "-js", "-a", "127.0.0.1", "-p", fmt.Sprint(port), "-sd", filepath.Join(dir, "js"))
	srv.Stdout, srv.Stderr = nil, nil
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var nc *nats.Conn
	for i := 0; i < 100; i++ {
		if nc, err = nats.Connect(url); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	self, _ := os.Executable()
	var results []Result
	for _, fetch := range []int{1, 32} {
		for _, system := range []string{"sluice", "go-worker"} {
			if err := freshStream(js); err != nil {
				return err
			}
			stop, err := startSystem(system, fetch, root, lib, url, dir, self)
			if err != nil {
				return err
			}
			if _, err := drive(js, system, fetch, 1, 200, "warm"); err != nil {
				stop()
				return fmt.Errorf("%s fetch %d warm-up: %w", system, fetch, err)
			}
			for _, w := range []int{1, 128} {
				count := n
				if w == 1 {
					count = n1
				}
				r, err := drive(js, system, fetch, w, count, fmt.Sprint("w", w))
				if err != nil {
					stop()
					return fmt.Errorf("%s fetch %d window %d: %w", system, fetch, w, err)
				}
				log.Printf("%-9s fetch %2d window %3d: %8.0f msgs/s  p50 %7.0f us  p99 %7.0f us", system, fetch, w, r.MsgsS, r.P50Us, r.P99Us)
				results = append(results, r)
			}
			stop()
		}
	}
	report(results)
	if outPath != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		return os.WriteFile(outPath, b, 0o644)
	}
	return nil
}

// freshStream makes the seed's stream anew (no backlog, no old consumers).
func freshStream(js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, "ai-inference")
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ai-inference", Subjects: []string{"inference.>"}, Storage: jetstream.FileStorage})
	return err
}

// startSystem runs sluiced (cfg/jobs.toml, fetch_max = fetch) or the
// baseline worker, and waits until it consumes.
func startSystem(system string, fetch int, root, lib, url, dir, self string) (func(), error) {
	var cmd *exec.Cmd
	ready := "jobs ingress started"
	if system == "sluice" {
		src, err := os.ReadFile(filepath.Join(root, "cfg/jobs.toml"))
		if err != nil {
			return nil, err
		}
		cfg := strings.NewReplacer(
			`servers = ["nats://127.0.0.1:4222"]`, fmt.Sprintf("servers = [%q]", url),
			`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`,
			`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
			`data_dir = "../.cache/sluice-jobs-data"`, fmt.Sprintf("data_dir = %q", filepath.Join(dir, "data")),
			"fetch_max = 32", fmt.Sprintf("fetch_max = %d", fetch),
			`"../`, `"`+root+"/", // paths relative to cfg/ become absolute
		).Replace(string(src))
		path := filepath.Join(dir, "jobs.toml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		cmd = exec.Command(filepath.Join(root, ".cache/bin/sluiced"), "-config", path)
		cmd.Env = append(os.Environ(), "SLUICE_ORT_LIB="+lib)
	} else {
		cmd = exec.Command(self, "-worker", "-server", url, "-fetch", fmt.Sprint(fetch), "-root", root, "-ort", lib)
		ready = "worker: onnxruntime"
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	up := make(chan struct{})
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ready) {
				once.Do(func() { close(up) })
			}
			if os.Getenv("JOBSBENCH_VERBOSE") != "" {
				log.Printf("%s| %s", system, sc.Text())
			}
		}
	}()
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("%s did not start", system)
	}
	time.Sleep(500 * time.Millisecond) // consumer made, first fetch out
	return stop, nil
}

// drive keeps w requests outstanding until n results are stored.
func drive(js jetstream.JetStream, system string, fetch, w, n int, tag string) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("%s-%d-%s-", system, fetch, tag)
	var mu sync.Mutex
	sent := make(map[string]time.Time, n)
	done := make(map[string]chan time.Time, n)
	for i := range n {
		done[fmt.Sprint(prefix, i)] = make(chan time.Time, 1)
	}
	// Results as stored: an ordered consumer from now on.
	oc, err := js.OrderedConsumer(ctx, "ai-inference", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"inference.results.mlp"}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return Result{}, err
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		if ch, ok := done[m.Headers().Get("Sluice-Input-Msg-Id")]; ok {
			select {
			case ch <- meta.Timestamp:
			default:
			}
		}
	})
	if err != nil {
		return Result{}, err
	}
	defer cc.Stop()
	body := func(i int) []byte {
		x := make([]float32, 4)
		for k := range x {
			x[k] = float32((k*7+i*3)%13-6) / 16
		}
		b, _ := json.Marshal(map[string]any{"id": fmt.Sprint(i), "inputs": []map[string]any{{"name": "x", "shape": []int{1, 4}, "datatype": "FP32", "data": x}}})
		return b
	}
	lat := make([]time.Duration, 0, n)
	var first time.Time
	var last time.Time
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	var missing int
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprint(prefix, i)
				h := nats.Header{}
				h.Set("X-Model-Version", "1")
				h.Set("Content-Type", "application/json")
				t0 := time.Now()
				mu.Lock()
				if first.IsZero() {
					first = t0
				}
				sent[id] = t0
				mu.Unlock()
				if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "inference.mlp", Header: h, Data: body(i)}, jetstream.WithMsgID(id)); err != nil {
					mu.Lock()
					missing++
					mu.Unlock()
					continue
				}
				select {
				case stored := <-done[id]:
					mu.Lock()
					lat = append(lat, stored.Sub(t0))
					if stored.After(last) {
						last = stored
					}
					mu.Unlock()
				case <-time.After(30 * time.Second):
					mu.Lock()
					missing++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	r := Result{System: system, Fetch: fetch, Window: w, N: len(lat), Missing: missing}
	if len(lat) == 0 {
		return r, fmt.Errorf("no results")
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	r.P50Us, r.P99Us, r.MeanUs = us(lat[len(lat)/2]), us(lat[len(lat)*99/100]), us(sum/time.Duration(len(lat)))
	r.MsgsS = float64(len(lat)) / last.Sub(first).Seconds()
	if missing > 0 {
		return r, fmt.Errorf("%d of %d requests got no result", missing, n)
	}
	return r, nil
}

func report(rs []Result) {
	find := func(sys string, fetch, w int) *Result {
		for i := range rs {
			if rs[i].System == sys && rs[i].Fetch == fetch && rs[i].Window == w {
				return &rs[i]
			}
		}
		return nil
	}
	fmt.Println()
	fmt.Println("| fetch | window | Sluice msgs/s | Go worker msgs/s | ratio | Sluice p50 µs | Go worker p50 µs | ratio | Sluice p99 µs | Go worker p99 µs | ratio |")
	fmt.Println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, fetch := range []int{1, 32} {
		for _, w := range []int{1, 128} {
			s, g := find("sluice", fetch, w), find("go-worker", fetch, w)
			if s == nil || g == nil {
				continue
			}
			fmt.Printf("| %d | %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", fetch, w,
				s.MsgsS, g.MsgsS, s.MsgsS/g.MsgsS, s.P50Us, g.P50Us, s.P50Us/g.P50Us, s.P99Us, g.P99Us, s.P99Us/g.P99Us)
		}
	}
	fmt.Println("\nratio = Sluice / Go worker (msgs/s: higher is better; latency: lower is better)")
}
