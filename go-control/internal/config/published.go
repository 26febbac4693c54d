package config

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"os"
)

// Keys and tokens published in the Sluice repository (the demo configs,
// the README, the wire spec's example tenant). Anyone can sign with them,
// so a config other hosts can reach refuses them unless auth.lab is set;
// the engine applies the same rule at start (auth/published.rs).
var (
	publishedKeys   = [][]byte{[]byte("suice-demo-key-0000000000000000"), []byte("sluice-example-key-tenant-7")}
	publishedTokens = []string{"sluice-demo-token-0000"}
)

// exposedAt names where a config is reachable from other hosts: a data
// plane on a NIC, or a listener on an address that is not loopback; ""
// when it is not.
func (cfg *Config) exposedAt() string {
	if cfg.Engine.Transport != "" && cfg.Engine.Transport != "io_uring" {
		return fmt.Sprintf("engine.transport = %q", cfg.Engine.Transport)
	}
	for _, l := range []struct{ key, v string }{
		{"io_uring.listen", cfg.IOUring.Listen},
		{"io_uring.tcp_listen", cfg.IOUring.TCPListen},
		{"frontdoor.http_listen", cfg.Frontdoor.HTTPListen},
		{"frontdoor.grpc_listen", cfg.Frontdoor.GRPCListen},
	} {
		if l.v == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(l.v); err != nil || !ap.Addr().IsLoopback() {
			return fmt.Sprintf("%s = %q", l.key, l.v)
		}
	}
	return ""
}

// published refuses a published key or token where other hosts can reach
// the appliance, unless auth.lab says it is a lab.
func (c *checker) published(cfg *Config) {
	if cfg.Auth.Lab {
		return
	}
	at := cfg.exposedAt()
	if at == "" {
		return
	}
	for i, t := range cfg.Tenants {
		if k, err := DecodeKey(t.Key, os.Getenv); err == nil && isPublishedKey(k) {
			c.add(fmt.Sprintf("tenants[%d].key", i),
				"this key is published in the Sluice repository, and %s is reachable from other hosts: anyone could sign as tenant %q; "+
					"set a key of your own (e.g. key = \"env:SLUICE_KEY_%d\"), or auth.lab = true on a lab host", at, t.Name, t.ID)
		}
		for j, tok := range t.Tokens {
			if d, err := DecodeToken(tok, os.Getenv); err == nil && isPublishedToken(d) {
				c.add(fmt.Sprintf("tenants[%d].tokens[%d]", i, j),
					"this bearer token is published in the Sluice repository, and %s is reachable from other hosts; "+
						"set a token of your own, or auth.lab = true on a lab host", at)
			}
		}
	}
}

func isPublishedKey(k []byte) bool {
	for _, p := range publishedKeys {
		if bytes.Equal(k, p) {
			return true
		}
	}
	return false
}

func isPublishedToken(digest []byte) bool {
	for _, t := range publishedTokens {
		d := sha256.Sum256([]byte(t))
		if bytes.Equal(digest, d[:]) {
			return true
		}
	}
	return false
}
