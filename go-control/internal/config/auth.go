package config

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

func (c *checker) auth(a *Auth, tenants int) {
	c.oneOf("auth.mode", a.Mode, "tenants", "none")
	c.rangeInt("auth.freshness_window_ms", a.FreshnessWindowMs, lim.FreshnessWindowMsMin, lim.FreshnessWindowMsMax)
	c.rangeInt("auth.replay_entries", a.ReplayEntries, lim.ReplayEntriesMin, lim.ReplayEntriesMax)
	if !isPow2(a.ReplayEntries) {
		c.add("auth.replay_entries", "%d is not a power of two", a.ReplayEntries)
	}
	c.rangeInt("auth.replay_senders", a.ReplaySenders, lim.ReplaySendersMin, lim.ReplaySendersMax)
	if !isPow2(a.ReplaySenders) {
		c.add("auth.replay_senders", "%d is not a power of two", a.ReplaySenders)
	}
	c.rangeInt("auth.replay_window_ids", a.ReplayWindowIDs, lim.ReplayWindowIDsMin, lim.ReplayWindowIDsMax)
	if !isPow2(a.ReplayWindowIDs) {
		c.add("auth.replay_window_ids", "%d is not a power of two", a.ReplayWindowIDs)
	}
	if a.Mode == "none" && tenants > 0 {
		c.add("tenants[0]", "auth.mode is \"none\": no tag would be checked; remove the tenants or set auth.mode = \"tenants\"")
	}
}

// UnauthenticatedExposure says why a config lets anyone who reaches the
// data plane send requests unchecked: auth.mode = "none" with a listen
// address that is not loopback (DPDK and RDMA face a NIC, so they always
// count). "" when it does not. sluiced logs it as a warning at start-up.
func (c *Config) UnauthenticatedExposure() string {
	if c.Auth.Mode != "none" {
		return ""
	}
	if c.Engine.Transport != "io_uring" {
		return fmt.Sprintf("auth.mode = \"none\" with transport %q: anyone on its network may send requests under any tenant id", c.Engine.Transport)
	}
	if ap, err := netip.ParseAddrPort(c.IOUring.Listen); err == nil && ap.Addr().IsLoopback() {
		return ""
	}
	return fmt.Sprintf("auth.mode = \"none\" with io_uring.listen = %q, which is not loopback: anyone who reaches it may send requests under any tenant id", c.IOUring.Listen)
}

func (c *checker) tenants(list []Tenant) {
	c.count("tenants", len(list), lim.TenantsMax)
	// Sets of what earlier tenants used: O(n), not a scan per tenant.
	ids := make(map[int64]bool, len(list))
	names := make(map[string]bool, len(list))
	for i, t := range list {
		key := fmt.Sprintf("tenants[%d]", i)
		c.token(key+".name", t.Name, lim.NameLenMax)
		if t.ID < 1 || t.ID > TenantIDMax {
			c.add(key+".id", "%d is out of range 1..=%d (0 is reserved)", t.ID, int64(TenantIDMax))
		}
		if ids[int64(t.ID)] || names[t.Name] {
			c.add(key+".id", "tenant id %d or name %q used twice", t.ID, t.Name)
		}
		ids[int64(t.ID)] = true
		names[t.Name] = true
		if _, err := DecodeKey(t.Key, os.Getenv); err != nil {
			c.add(key+".key", "%v", err)
		}
		c.count(key+".tokens", len(t.Tokens), TokensPerTenantMax)
		for j, tok := range t.Tokens {
			if _, err := DecodeToken(tok, os.Getenv); err != nil {
				c.add(fmt.Sprintf("%s.tokens[%d]", key, j), "%v", err)
			}
		}
		c.tenantPatterns(key, t)
	}
}

// tenantPatterns checks a tenant's lists as the engine does: at most
// lim.TenantPatternsMax patterns each, every one a token of the wire limit of
// what it matches.
func (c *checker) tenantPatterns(key string, t Tenant) {
	lists := []struct {
		name   string
		list   []string
		lenMax int
	}{
		{"models", t.Models, lim.ModelNameLenMax},
		{"adapters", t.Adapters, lim.AdapterLenMax},
		{"routes", t.Routes, lim.NameLenMax},
		{"subjects", t.Subjects, lim.SubjectLenMax},
	}
	for _, l := range lists {
		c.count(key+"."+l.name, len(l.list), lim.TenantPatternsMax)
		globs := 0
		for j, p := range l.list {
			c.token(fmt.Sprintf("%s.%s[%d]", key, l.name, j), p, l.lenMax)
			if IsGeneralGlob(p) {
				globs++
				if globs == lim.TenantGlobsMax+1 {
					c.add(fmt.Sprintf("%s.%s[%d]", key, l.name, j),
						"at most %d globs other than \"*\", \"name*\" and \"*name\"", lim.TenantGlobsMax)
				}
			}
		}
	}
}

// IsGeneralGlob reports whether a pattern is a glob the engine matches one by
// one: anything with * or ? other than "*", "name*" and "*name" (those are
// hashed sets in the engine, so a list may hold many).
func IsGeneralGlob(p string) bool {
	n := strings.Count(p, "*") + strings.Count(p, "?")
	switch {
	case n == 0:
		return false
	case n == 1 && (p == "*" || strings.HasSuffix(p, "*") || strings.HasPrefix(p, "*")):
		return false
	}
	return true
}

// DecodeKey decodes a tenant key written as "hex:<digits>" or "env:VAR"
// (VAR holding the hex digits), as the engine does. Errors never include
// the key itself.
func DecodeKey(s string, getenv func(string) string) ([]byte, error) {
	var h string
	if v, ok := strings.CutPrefix(s, "hex:"); ok {
		h = v
	} else if name, ok := strings.CutPrefix(s, "env:"); ok {
		h = getenv(name)
		if h == "" {
			return nil, fmt.Errorf("environment variable %s is not set", name)
		}
	} else {
		return nil, fmt.Errorf("key must start with \"hex:\" or \"env:\"")
	}
	b, err := hex.DecodeString(strings.TrimSpace(h))
	if err != nil {
		return nil, fmt.Errorf("key is not an even number of hex digits")
	}
	if len(b) < lim.TenantKeyLenMin {
		return nil, fmt.Errorf("key is %d bytes; it must be at least %d", len(b), lim.TenantKeyLenMin)
	}
	return b, nil
}
