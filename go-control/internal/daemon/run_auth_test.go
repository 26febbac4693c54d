package daemon

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// Start-up says what [auth] leaves open: an unauthenticated data plane off
// loopback, or tenants mode with no tenant (everything refused).
func TestWarnAuth(t *testing.T) {
	for _, tc := range []struct {
		src, want string
	}{
		{"[auth]\nmode = \"none\"\n[io_uring]\nlisten = \"0.0.0.0:7070\"\n", "which is not loopback"},
		{"[auth]\nmode = \"none\"\n", ""},
		{"[io_uring]\nlisten = \"0.0.0.0:7070\"\n", "no tenant is configured"},
		{"[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n", ""},
	} {
		cfg, err := config.Parse("t.toml", []byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		warnAuth(slog.New(slog.NewTextHandler(&buf, nil)), cfg)
		if got := buf.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Fatalf("%q: logged %q, want %q", tc.src, got, tc.want)
		}
	}
}
