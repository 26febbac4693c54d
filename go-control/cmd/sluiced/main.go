// Command sluiced is the Sluice control daemon: it reads the config, starts
// the data-plane engine, and serves the admin API and Prometheus metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/fleet"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
	"github.com/sluice-ai/sluice/go-control/internal/jobs"
	// The real data-plane engine, linked through the C ABI.
	_ "github.com/sluice-ai/sluice/go-control/internal/rustengine"
)

func main() {
	os.Exit(run())
}

func run() int {
	cfgPath := flag.String("config", "/etc/sluice/sluice.toml", "path of the Sluice TOML config")
	engName := flag.String("engine", defaultEngine(), "engine implementation: "+fmt.Sprint(engine.Available()))
	timeout := flag.Duration("shutdown-timeout", daemon.ShutdownTimeoutDefault, "longest graceful drain on SIGTERM")
	check := flag.Bool("check", false, "validate the config and exit")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("sluiced", daemon.Version)
		return 0
	}
	if *check {
		if _, err := config.Load(*cfgPath); err != nil {
			fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
			return 1
		}
		fmt.Println("config ok:", *cfgPath)
		return 0
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *engName == "" {
		fmt.Fprintln(os.Stderr, "sluiced: no data-plane engine is built in; build with the engine (cgo)")
		return 2
	}
	opts := daemon.Options{ConfigPath: *cfgPath, Engine: *engName, ShutdownTimeout: *timeout, Logger: log}
	// Fleet mode: the control state and the registry live in the cluster.
	var fl *fleet.Fleet
	cfg, cfgErr := config.Load(*cfgPath) // daemon.New reports a bad file
	if cfgErr == nil && len(cfg.Jobs.Streams) > 0 {
		// Async jobs: JetStream streams into this appliance's data plane.
		if opts.Ingress, cfgErr = jobs.New(cfg, log); cfgErr != nil {
			fmt.Fprintf(os.Stderr, "sluiced: %v\n", cfgErr)
			return 1
		}
	}
	if cfgErr == nil && cfg.Control.Store == "nats" {
		var err error
		if fl, err = fleet.Connect(context.Background(), cfg.Fleet, log); err != nil {
			fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
			return 1
		}
		defer fl.Close()
		opts.Store, opts.RegistryStore, opts.Fleet = fl.Store, fl.Registry, fl
		opts.Mount = map[string]http.Handler{"/v1/fleet": fl.Handler()}
		opts.Collectors = append(opts.Collectors, fl.Collector())
		// The heatmap's fleet view: load shared on core NATS.
		if opts.LoadFleet, err = heatmap.NewFleet(fl.Conn(), fl.Name(), log); err != nil {
			fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
			return 1
		}
		defer opts.LoadFleet.Close()
	}
	d, err := daemon.New(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
		return 1
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if opts.LoadFleet != nil {
		go opts.LoadFleet.Run(ctx, d.LoadDoc)
	}
	fleetErr := make(chan error, 1)
	if fl != nil {
		go func() {
			err := fl.Run(ctx, d)
			if err != nil {
				log.Error("fleet watch failed; stopping", "err", err)
				stop()
			}
			fleetErr <- err
		}()
	}
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "sluiced: %v\n", err)
		return 1
	}
	if fl != nil {
		stop()
		if err := <-fleetErr; err != nil {
			fmt.Fprintf(os.Stderr, "sluiced: fleet: %v\n", err)
			return 1
		}
	}
	return 0
}

// defaultEngine is the real engine when it is linked in, else none: the
// fake is never picked silently.
func defaultEngine() string {
	if slices.Contains(engine.Available(), "rust") {
		return "rust"
	}
	return ""
}
