// Command regserver runs the Sluice schema registry on its own, for
// conformance tests with real Confluent clients:
//
//	go run ./registry/cmd/regserver -listen 127.0.0.1:8081 [-data DIR]
//
// Without -data the registry lives in memory. It prints "listening on
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

	"github.com/sluice-ai/sluice/go-control/registry"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	dataDir := flag.String("data", "", "data dir for the bbolt store (empty: in memory)")
	level := flag.String("compatibility", "BACKWARD", "default compatibility level")
	flag.Parse()
	if err := run(*listen, *dataDir, *level); err != nil {
		log.Fatalf("regserver: %v", err)
	}
}

func run(listen, dataDir, level string) error {
	lvl, ok := compat.ParseLevel(level)
	if !ok {
		return fmt.Errorf("invalid compatibility level %q", level)
	}
	var store registry.Store = registry.NewMemoryStore()
	if dataDir != "" {
		s, err := registry.OpenBoltStore(dataDir)
		if err != nil {
			return err
		}
		store = s
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reg, err := registry.Open(ctx, store, registry.Options{DefaultCompatibility: lvl})
	if err != nil {
		store.Close()
		return err
	}
	defer reg.Close()
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
