// Command sluice-faults is the fleet fault-injection suite
// (internal/faults): a 3-node nats-server cluster and three sluiced
// appliances, random writes with recorded outcomes, SIGKILL and SIGSTOP of
// nodes and appliances, data-plane traffic, and a checker. It prints the
// history's statistics and every violation, and exits 1 on any.
//
//	sluice-faults -duration 60s            # a short run (CI)
//	sluice-faults -seed 1234 -duration 10m # replay a seed, longer
//	sluice-faults -check DIR/history.json  # re-check a saved history
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/faults"
)

func main() { os.Exit(run()) }

func run() int {
	repo := flag.String("repo", "", "the repository root (default: found from the working directory)")
	seed := flag.Int64("seed", 0, "seed of the schedule of writes and faults (0: from the clock; printed)")
	duration := flag.Duration("duration", 60*time.Second, "length of the fault phase")
	bound := flag.Duration("bound", time.Second, "longest time from a 2xx answer to every appliance serving the change, while a majority of nodes is up")
	failover := flag.Duration("failover-bound", 15*time.Second, "the same bound when the change's stream leader is killed or stopped right after acknowledging it (the followers learn it from the next leader)")
	rate := flag.Int("rate", 100, "data-plane requests per second to each appliance")
	writeMin := flag.Duration("write-min", 150*time.Millisecond, "shortest pause between two writes of one writer")
	writeMax := flag.Duration("write-max", 500*time.Millisecond, "longest pause between two writes of one writer")
	dir := flag.String("dir", "", "work dir for logs, stores and history.json (default: a new temp dir, kept on failure)")
	check := flag.String("check", "", "check a saved history.json and exit")
	flag.Parse()

	if *check != "" {
		h, err := faults.Load(*check)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sluice-faults:", err)
			return 2
		}
		return report(faults.Check(h), *check)
	}
	root := *repo
	if root == "" {
		var err error
		if root, err = findRepo(); err != nil {
			fmt.Fprintln(os.Stderr, "sluice-faults:", err)
			return 2
		}
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1_000_000_000
	}
	workDir := *dir
	if workDir == "" {
		var err error
		if workDir, err = os.MkdirTemp("", "sluice-faults-"); err != nil {
			fmt.Fprintln(os.Stderr, "sluice-faults:", err)
			return 2
		}
	}
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-faults:", err)
		return 2
	}
	bin := func(p string) string { return filepath.Join(root, p) }
	cfg := faults.Config{
		Seed: *seed, Duration: *duration, Bound: *bound, FailoverBound: *failover, Rate: *rate, WriteEvery: [2]time.Duration{*writeMin, *writeMax},
		Dir: workDir, Repo: root, Log: os.Stdout,
		NATSServer: bin(".cache/bin/nats-server"), Sluiced: bin(".cache/bin/sluiced"), Loadgen: bin("target/release/loadgen"),
	}
	for _, p := range []string{cfg.NATSServer, cfg.Sluiced, cfg.Loadgen} {
		if _, err := os.Stat(p); err != nil {
			fmt.Fprintf(os.Stderr, "sluice-faults: %s missing (scripts/setup.sh installs nats-server; scripts/build-ffi.sh builds sluiced; "+
				"cargo build --release -p sluice-perf --bin loadgen builds loadgen)\n", p)
			return 2
		}
	}
	fmt.Printf("sluice-faults: seed %d (replay: -seed %d), fault phase %v, work dir %s\n", *seed, *seed, *duration, workDir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, rep, err := faults.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice-faults: seed %d: %v (logs in %s)\n", *seed, err, workDir)
		return 1
	}
	code := report(rep, filepath.Join(workDir, "history.json"))
	if code != 0 {
		fmt.Printf("sluice-faults: FAILED with seed %d; replay with -seed %d; logs and history in %s\n", *seed, *seed, workDir)
		return code
	}
	if *dir == "" {
		os.RemoveAll(workDir)
	}
	return 0
}

func report(rep *faults.Report, history string) int {
	for _, l := range rep.Lines {
		fmt.Println("FAULTS " + l)
	}
	for _, v := range rep.Violations {
		fmt.Println("VIOLATION " + v)
	}
	if !rep.OK() {
		fmt.Printf("sluice-faults: %d violations (history: %s)\n", len(rep.Violations), history)
		return 1
	}
	fmt.Println("sluice-faults: no violation")
	return 0
}

// findRepo walks up from the working directory to the repository root.
func findRepo() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "cfg/fleet.toml")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no repository (cfg/fleet.toml) above the working directory; pass -repo")
		}
		d = parent
	}
}
