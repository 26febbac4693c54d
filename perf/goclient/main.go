// Command goclient-bench drives a Sluice endpoint with the Go client
// (clients/go) in a closed loop: N goroutines share one client (one UDP
// socket), each with one request in flight. It reports what loadgen
// reports (p50/p90/p99 latency of successful requests, answers per
// second), as JSON, so that perf/goclient.sh can put the two side by side.
//
//	goclient-bench --addr 127.0.0.1:7070 --closed 32 --duration 5s --warmup 1s
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
)

// samplesMax bounds the latencies kept per goroutine (preallocated, so the
// measurement loop does not grow slices).
const samplesMax = 1 << 22

func main() {
	addr := flag.String("addr", "127.0.0.1:7070", "endpoint")
	closed := flag.Int("closed", 1, "requests in flight (goroutines)")
	duration := flag.Duration("duration", 5*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured traffic first")
	model := flag.String("model", "mlp", "model")
	version := flag.String("version", "1.0.0", "model version")
	batch := flag.Int("batch", 1, "MLP batch: x is f32 [batch, 4], every element 0.5 (as perf/mixes/mlp-b1.toml)")
	tenant := flag.Uint("tenant", 1, "tenant id")
	key := flag.String("key", "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030", "tenant key (hex:... or text; empty: unsigned)")
	timeout := flag.Duration("timeout", time.Second, "per-request timeout")
	flag.Parse()
	if *closed < 1 || *batch < 1 {
		fmt.Fprintln(os.Stderr, "goclient-bench: --closed and --batch must be at least 1")
		os.Exit(2)
	}
	k := []byte(*key)
	if h, ok := strings.CutPrefix(*key, "hex:"); ok {
		var err error
		if k, err = hex.DecodeString(h); err != nil {
			fmt.Fprintln(os.Stderr, "goclient-bench: --key:", err)
			os.Exit(2)
		}
	}
	if *key == "" {
		k = nil
	}
	c, err := sluice.Dial(context.Background(), *addr, sluice.Options{TenantID: uint32(*tenant), Key: k, Timeout: *timeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient-bench:", err)
		os.Exit(1)
	}
	defer c.Close()
	x := make([]float32, 4**batch)
	for i := range x {
		x[i] = 0.5
	}
	req := sluice.NewRequest(*model, *version, sluice.NewTensor("x", []uint64{uint64(*batch), 4}, x))

	var measuring, stop atomic.Bool
	var okCount, errCount atomic.Uint64
	errs := sync.Map{}
	lat := make([][]time.Duration, *closed)
	var wg sync.WaitGroup
	for g := range lat {
		lat[g] = make([]time.Duration, 0, samplesMax / *closed)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				resp, err := c.Infer(context.Background(), req)
				d := time.Since(t0)
				if !measuring.Load() {
					if err == nil {
						resp.Release()
					}
					continue
				}
				if err != nil {
					errCount.Add(1)
					errs.Store(err.Error(), true)
					continue
				}
				resp.Release()
				okCount.Add(1)
				if len(lat[g]) < cap(lat[g]) {
					lat[g] = append(lat[g], d)
				}
			}
		}(g)
	}
	time.Sleep(*warmup)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(*duration)
	measuring.Store(false)
	elapsed := time.Since(start)
	stop.Store(true)
	wg.Wait()

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))]) / 1e3
	}
	var names []string
	errs.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	st := c.Stats()
	out := map[string]any{
		"client":             "go",
		"closed":             *closed,
		"ok":                 okCount.Load(),
		"errors":             errCount.Load(),
		"error_kinds":        names,
		"elapsed_s":          elapsed.Seconds(),
		"throughput_per_sec": float64(okCount.Load()) / elapsed.Seconds(),
		"latency_us":         map[string]float64{"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1)},
		"stale":              st.Stale,
		"malformed":          st.Malformed,
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}
