// Command regserver runs the Sluice schema registry on its own, for
// conformance tests with real Confluent clients:
//
//	go run ./registry/cmd/regserver -listen 127.0.0.1:8081 [-data DIR | -nats URL]
//
// Without -data or -nats the registry lives in memory. It prints "listening on
// ADDR" once the socket is bound (with -listen 127.0.0.1:0 the kernel picks
// the port) and exits cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/registry"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
	"github.com/sluice-ai/sluice/go-control/registry/natsstore"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	dataDir := flag.String("data", "", "data dir for the bbolt store (empty: in memory)")
	natsURL := flag.String("nats", "", "NATS server URL: keep the registry in a JetStream KV bucket")
	level := flag.String("compatibility", "BACKWARD", "default compatibility level")
	flag.Parse()
	if err := run(*listen, *dataDir, *natsURL, *level); err != nil {
		log.Fatalf("regserver: %v", err)
	}
}

func run(listen, dataDir, natsURL, level string) error {
	lvl, ok := compat.ParseLevel(level)
	if !ok {
		return fmt.Errorf("invalid compatibility level %q", level)
	}
	if dataDir != "" && natsURL != "" {
		return errors.New("-data and -nats exclude each other")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var store registry.Store = registry.NewMemoryStore()
	var kv *natsstore.Store
	switch {
	case dataDir != "":
		s, err := registry.OpenBoltStore(dataDir)
		if err != nil {
			return err
		}
		store = s
	case natsURL != "":
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		if kv, err = natsstore.Open(ctx, js, "", 1); err != nil {
			return err
		}
		store = kv
	}
	reg, err := registry.Open(ctx, store, registry.Options{DefaultCompatibility: lvl})
	if err != nil {
		store.Close()
		return err
	}
	defer reg.Close()
	if kv != nil {
		if err := kv.Watch(ctx, func() { reg.Refresh(ctx) }); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.NewHandler(reg), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
