package fleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

func fleetFile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../cfg/fleet.toml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The [fleet] table is read strictly, with file:line in every error.
func TestFleetConfigErrors(t *testing.T) {
	src := fleetFile(t)
	if _, err := config.Parse("../../../cfg/fleet.toml", []byte(src)); err != nil {
		t.Fatalf("cfg/fleet.toml: %v", err)
	}
	servers := `servers = ["nats://127.0.0.1:4222", "nats://127.0.0.1:4223", "nats://127.0.0.1:4224"]`
	for _, c := range []struct{ old, new, want string }{
		{servers, `servers = []`, `fleet.servers: is required when control.store is "nats"`},
		{servers, `servers = ["127.0.0.1:4222"]`, `fleet.servers[0]: "127.0.0.1:4222" is not a nats://`},
		{`replicas = 3`, `replicas = 7`, `fleet.replicas: 7 is out of range 1..=5`},
		{`settle_ms = 20`, `settle_ms = -1`, `fleet.settle_ms: -1 is out of range`},
		{`resync_interval_ms = 5000`, `resync_interval_ms = 10`, `fleet.resync_interval_ms: 10 is out of range`},
		{`bucket_prefix = "sluice"`, `bucket_prefix = "a.b"`, `fleet.bucket_prefix: "a.b" must be`},
		{`settle_ms = 20`, "settle_ms = 20\nsettle_s = 1", `fleet.settle_s: unknown key`},
		{`history = 1`, `history = 0`, `fleet.history: 0 is out of range 1..=4096`},
		{`check_interval_ms = 200`, `check_interval_ms = 5`, `fleet.check_interval_ms: 5 is out of range 20..=10000`},
	} {
		if strings.Count(src, c.old) != 1 {
			t.Fatalf("cfg/fleet.toml no longer has exactly one %q", c.old)
		}
		_, err := config.Parse("f.toml", []byte(strings.Replace(src, c.old, c.new, 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "f.toml:") {
			t.Errorf("%s: got %v, want %q with file:line", c.new, err, c.want)
		}
	}
	// The embedded store needs no servers.
	emb := strings.Replace(strings.Replace(src, servers, `servers = []`, 1), `store = "nats"`, `store = "embedded"`, 1)
	if _, err := config.Parse("f.toml", []byte(emb)); err != nil {
		t.Fatalf("embedded without servers: %v", err)
	}
}

// A cluster that is not there is a clear I/O error naming it.
func TestConnectFailsClearly(t *testing.T) {
	cfg := config.Defaults().Fleet
	cfg.Servers = []string{fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))}
	cfg.ConnectTimeoutMs = 500
	_, err := Connect(context.Background(), cfg, nil)
	if !errors.Is(err, errs.ErrIO) || !strings.Contains(err.Error(), cfg.Servers[0]) {
		t.Fatalf("got %v", err)
	}
	cfg.Servers = nil
	if _, err := Connect(context.Background(), cfg, nil); !errors.Is(err, errs.ErrInvalidConfig) {
		t.Fatalf("no servers: %v", err)
	}
}
