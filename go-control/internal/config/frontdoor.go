package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Front door limits (the engine checks the same).
const (
	FrontdoorThreadsMax = 16
	FrontdoorSlotsMax   = 4096
	BodyBytesMin        = 4096
	BodyBytesMax        = 256<<20 - 4096
	ReplyBytesMin       = 4096
	ReplyBytesMax       = 256 << 20
	FrontdoorTimeoutMax = 3_600_000
	FrontdoorConnsMax   = 1 << 20 // per thread, per source, and sources tracked
	TokensPerTenantMax  = 8
	TokenLenMin         = 16
	HMACSkewMsMax       = 300_000
	HMACNoncesMax       = 1 << 24
	TLSReloadMsMin      = 100
)

// DecodeToken reads a bearer token spec as the engine does: the SHA-256
// digest of the token ("sha256:<64 hex>") or "env:VAR" holding the token.
// Errors never include the token.
func DecodeToken(s string, getenv func(string) string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, "sha256:"); ok {
		b, err := hex.DecodeString(strings.TrimSpace(h))
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("a sha256: token is 64 hex digits")
		}
		return b, nil
	}
	if name, ok := strings.CutPrefix(s, "env:"); ok {
		t := strings.TrimSpace(getenv(name))
		if t == "" {
			return nil, fmt.Errorf("environment variable %s is not set", name)
		}
		if len(t) < TokenLenMin {
			return nil, fmt.Errorf("a token is at least %d bytes", TokenLenMin)
		}
		d := sha256.Sum256([]byte(t))
		return d[:], nil
	}
	return nil, fmt.Errorf("token must start with \"sha256:\" or \"env:\"")
}

func (c *checker) frontdoor(f *Frontdoor, workers []int) {
	for _, l := range []struct{ key, v string }{
		{"frontdoor.http_listen", f.HTTPListen}, {"frontdoor.grpc_listen", f.GRPCListen},
	} {
		if l.v == "" {
			continue
		}
		if _, err := netip.ParseAddrPort(l.v); err != nil {
			c.add(l.key, "%q is not an IP:port address", l.v)
		}
	}
	if f.HTTPListen != "" && f.HTTPListen == f.GRPCListen && !strings.HasSuffix(f.HTTPListen, ":0") {
		c.add("frontdoor.grpc_listen", "must differ from http_listen")
	}
	c.rangeInt("frontdoor.threads", f.Threads, 1, FrontdoorThreadsMax)
	if len(f.Cores) != 0 && len(f.Cores) != f.Threads {
		c.add("frontdoor.cores", "one core per front-door thread, or none")
	}
	online, desc := OnlineCPUs()
	for i, core := range f.Cores {
		key := fmt.Sprintf("frontdoor.cores[%d]", i)
		if !online[core] {
			c.add(key, "core %d does not exist or is offline (online: %s)", core, desc)
		}
		if slices.Contains(workers, core) {
			c.add(key, "core %d is a worker core: the front door runs off the pinned workers", core)
		}
	}
	c.rangeInt("frontdoor.slots", f.Slots, 1, FrontdoorSlotsMax)
	c.rangeInt("frontdoor.body_bytes_max", f.BodyBytesMax, BodyBytesMin, BodyBytesMax)
	c.rangeInt("frontdoor.reply_bytes_max", f.ReplyBytesMax, ReplyBytesMin, ReplyBytesMax)
	c.rangeInt("frontdoor.handshake_timeout_ms", f.HandshakeTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.idle_timeout_ms", f.IdleTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.header_timeout_ms", f.HeaderTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.body_timeout_ms", f.BodyTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.write_timeout_ms", f.WriteTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.connections_max", f.ConnectionsMax, 1, FrontdoorConnsMax)
	c.rangeInt("frontdoor.connections_per_source_max", f.ConnectionsPerSourceMax, 1, FrontdoorConnsMax)
	c.rangeInt("frontdoor.sources_max", f.SourcesMax, 1, FrontdoorConnsMax)
	c.rangeInt("frontdoor.request_timeout_ms", f.RequestTimeoutMs, 1, FrontdoorTimeoutMax)
	c.rangeInt("frontdoor.hmac_skew_ms", f.HMACSkewMs, 1, HMACSkewMsMax)
	c.rangeInt("frontdoor.hmac_nonces_max", f.HMACNoncesMax, 1, HMACNoncesMax)
	if (f.TLSCert == "") != (f.TLSKey == "") {
		// Named at the one that is there (the other has no line).
		key := "frontdoor.tls_cert"
		if f.TLSCert == "" {
			key = "frontdoor.tls_key"
		}
		c.add(key, "tls_cert and tls_key go together")
	}
	c.rangeInt("frontdoor.tls_reload_ms", f.TLSReloadMs, TLSReloadMsMin, FrontdoorTimeoutMax)
}
