package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"runtime"
	"strconv"
	"strings"
)

// Limits, mirrored from the comments in cfg/sluice.toml and the wire format
// (dataplane/wire/src/lib.rs). The engine checks them too.
const (
	WorkersMax         = 256
	RxBurstMax         = 256
	SpinUsMax          = 1_000_000
	RingEntriesMax     = 32768
	RxBuffersMax       = 32768
	TxBuffersMax       = 32768
	BufferSizeMin      = 512
	BufferSizeMax      = 65536
	MaxConcurrencyMax  = 4096
	QueueDepthMax      = 65536
	NameLenMax         = 64 // shard, route, tenant and peer names
	ModelNameLenMax    = 64
	ModelVersionLenMax = 32
	AdapterLenMax      = 64
	IntentLenMax       = 32
	LabelLenMax        = 128
	TenantKeyLenMin    = 16 // bytes of HMAC key
	TenantKeyLenMax    = 128
	TenantIDMax        = 1<<32 - 1
)

// Issue is one validation failure; Key is the path of the offending value.
type Issue struct {
	Key string
	Msg string
}

func (i Issue) Error() string { return i.Key + ": " + i.Msg }

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

type checker struct{ issues []Issue }

func (c *checker) add(key, format string, args ...any) {
	c.issues = append(c.issues, Issue{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) rangeInt(key string, v, lo, hi int) {
	if v < lo || v > hi {
		c.add(key, "%d is out of range %d..=%d", v, lo, hi)
	}
}

func (c *checker) oneOf(key, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.add(key, "%q is not one of %s", v, strings.Join(quoteAll(allowed), ", "))
}

func (c *checker) name(key, v string, lenMax int) {
	switch {
	case v == "":
		c.add(key, "is required")
	case len(v) > lenMax:
		c.add(key, "%q is longer than %d bytes", v, lenMax)
	case !nameRe.MatchString(v):
		c.add(key, "%q may hold only letters, digits, '_', '.', '-' and must start with a letter or digit", v)
	}
}

func (c *checker) labels(key string, m map[string]string) {
	for k, v := range m {
		if k == "" || len(k) > LabelLenMax || len(v) > LabelLenMax {
			c.add(key+"."+k, "label key and value must be 1..=%d bytes", LabelLenMax)
		}
	}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// Validate checks every section and the references between them. It
// returns nil when the config is good.
func Validate(cfg *Config) []Issue {
	c := &checker{}
	c.engine(&cfg.Engine)
	c.ioURing(&cfg.IOUring)
	c.labels("host.labels", cfg.Host.Labels)
	shards := c.shards(cfg.Shards)
	tenants := c.tenants(cfg.Tenants)
	c.routes(cfg.Routes, shards, tenants)
	c.models(cfg.Models)
	c.peers(cfg.Peers)
	c.control(&cfg.Control)
	return c.issues
}

func (c *checker) engine(e *Engine) {
	if len(e.Workers) == 0 || len(e.Workers) > WorkersMax {
		c.add("engine.workers", "needs 1..=%d cores, got %d", WorkersMax, len(e.Workers))
	}
	seen := map[int]bool{}
	ncpu := runtime.NumCPU()
	for i, core := range e.Workers {
		key := fmt.Sprintf("engine.workers[%d]", i)
		if core < 0 || core >= ncpu {
			c.add(key, "core %d does not exist (this host has cores 0..=%d)", core, ncpu-1)
		}
		if seen[core] {
			c.add(key, "core %d listed twice", core)
		}
		seen[core] = true
	}
	c.oneOf("engine.transport", e.Transport, "io_uring", "dpdk", "rdma")
	c.rangeInt("engine.rx_burst_max", e.RxBurstMax, 1, RxBurstMax)
	c.oneOf("engine.hugepages", e.Hugepages, "auto", "required", "off")
	c.oneOf("engine.poll", e.Poll, "busy", "adaptive")
	c.rangeInt("engine.spin_us", e.SpinUs, 0, SpinUsMax)
}

func isPow2(v int) bool { return v > 0 && v&(v-1) == 0 }

func (c *checker) ioURing(u *IOUring) {
	if _, err := netip.ParseAddrPort(u.Listen); err != nil {
		c.add("io_uring.listen", "%q is not an IP:port address", u.Listen)
	}
	c.rangeInt("io_uring.ring_entries", u.RingEntries, 1, RingEntriesMax)
	if !isPow2(u.RingEntries) {
		c.add("io_uring.ring_entries", "%d is not a power of two", u.RingEntries)
	}
	c.rangeInt("io_uring.rx_buffers", u.RxBuffers, 1, RxBuffersMax)
	if !isPow2(u.RxBuffers) {
		c.add("io_uring.rx_buffers", "%d is not a power of two (buffer rings need one)", u.RxBuffers)
	}
	c.rangeInt("io_uring.tx_buffers", u.TxBuffers, 1, TxBuffersMax)
	c.rangeInt("io_uring.buffer_size", u.BufferSize, BufferSizeMin, BufferSizeMax)
}

func (c *checker) shards(list []Shard) map[string]bool {
	names := map[string]bool{}
	for i, s := range list {
		key := fmt.Sprintf("shards[%d]", i)
		c.name(key+".name", s.Name, NameLenMax)
		if names[s.Name] {
			c.add(key+".name", "shard %q defined twice", s.Name)
		}
		names[s.Name] = true
		c.labels(key+".labels", s.Labels)
		c.rangeInt(key+".max_concurrency", s.MaxConcurrency, 1, MaxConcurrencyMax)
		c.rangeInt(key+".queue_depth", s.QueueDepth, 1, QueueDepthMax)
	}
	return names
}

func (c *checker) tenants(list []Tenant) map[string]bool {
	names := map[string]bool{}
	ids := map[int64]bool{}
	for i, t := range list {
		key := fmt.Sprintf("tenants[%d]", i)
		c.name(key+".name", t.Name, NameLenMax)
		if names[t.Name] {
			c.add(key+".name", "tenant %q defined twice", t.Name)
		}
		names[t.Name] = true
		if t.ID < 1 || t.ID > TenantIDMax {
			c.add(key+".id", "%d is out of range 1..=%d", t.ID, int64(TenantIDMax))
		} else if ids[t.ID] {
			c.add(key+".id", "tenant id %d used twice", t.ID)
		}
		ids[t.ID] = true
		if _, err := DecodeKey(t.Key); err != nil {
			c.add(key+".key", "%v", err)
		}
		for j, m := range t.Models {
			if m == "" || len(m) > ModelNameLenMax {
				c.add(fmt.Sprintf("%s.models[%d]", key, j), "must be \"*\" or a model name of 1..=%d bytes", ModelNameLenMax)
			}
		}
		for j, a := range t.Adapters {
			if a == "" || len(a) > AdapterLenMax {
				c.add(fmt.Sprintf("%s.adapters[%d]", key, j), "must be \"*\" or an adapter id of 1..=%d bytes", AdapterLenMax)
			}
		}
	}
	return names
}

// DecodeKey decodes a tenant key written as "hex:<even number of hex digits>".
// Errors never include the key itself.
func DecodeKey(s string) ([]byte, error) {
	h, ok := strings.CutPrefix(s, "hex:")
	if !ok {
		return nil, fmt.Errorf("must be written as \"hex:<digits>\"")
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("is not valid hex")
	}
	if len(b) < TenantKeyLenMin || len(b) > TenantKeyLenMax {
		return nil, fmt.Errorf("key is %d bytes; it must be %d..=%d", len(b), TenantKeyLenMin, TenantKeyLenMax)
	}
	return b, nil
}

func (c *checker) routes(list []Route, shards, tenants map[string]bool) {
	names := map[string]bool{}
	for i, r := range list {
		key := fmt.Sprintf("routes[%d]", i)
		c.name(key+".name", r.Name, NameLenMax)
		if names[r.Name] {
			c.add(key+".name", "route %q defined twice", r.Name)
		}
		names[r.Name] = true
		if len(r.Model) > ModelNameLenMax {
			c.add(key+".model", "longer than %d bytes", ModelNameLenMax)
		}
		if r.Version != "" {
			if err := CheckVersionPattern(r.Version); err != nil {
				c.add(key+".version", "%v", err)
			}
		}
		if len(r.Adapter) > AdapterLenMax {
			c.add(key+".adapter", "longer than %d bytes", AdapterLenMax)
		}
		if len(r.Intent) > IntentLenMax {
			c.add(key+".intent", "longer than %d bytes", IntentLenMax)
		}
		if r.Tenant != "" && !tenants[r.Tenant] {
			c.add(key+".tenant", "unknown tenant %q", r.Tenant)
		}
		if r.Shard == "" {
			c.add(key+".shard", "is required")
		} else if !shards[r.Shard] {
			c.add(key+".shard", "unknown shard %q", r.Shard)
		}
	}
}

func (c *checker) models(list []Model) {
	versions := map[string]bool{}
	aliases := map[string]string{} // model/alias -> version
	for i, m := range list {
		key := fmt.Sprintf("models[%d]", i)
		c.name(key+".name", m.Name, ModelNameLenMax)
		c.name(key+".version", m.Version, ModelVersionLenMax)
		id := m.Name + "@" + m.Version
		if versions[id] {
			c.add(key+".version", "model %s version %s defined twice", m.Name, m.Version)
		}
		versions[id] = true
		c.oneOf(key+".kind", m.Kind, "onnx", "null", "echo")
		if m.Kind == "onnx" && m.Path == "" {
			c.add(key+".path", "is required for kind \"onnx\"")
		}
		if m.Kind != "onnx" && m.Path != "" {
			c.add(key+".path", "only kind \"onnx\" takes a path")
		}
		for j, a := range m.Aliases {
			akey := fmt.Sprintf("%s.aliases[%d]", key, j)
			c.name(akey, a, ModelVersionLenMax)
			if prev, ok := aliases[m.Name+"/"+a]; ok {
				c.add(akey, "alias %q of model %s already points to version %s", a, m.Name, prev)
			}
			aliases[m.Name+"/"+a] = m.Version
		}
		ids := map[string]bool{}
		for j, a := range m.Adapters {
			akey := fmt.Sprintf("%s.adapters[%d]", key, j)
			c.name(akey+".id", a.ID, AdapterLenMax)
			if ids[a.ID] {
				c.add(akey+".id", "adapter %q defined twice", a.ID)
			}
			ids[a.ID] = true
			if a.Path == "" {
				c.add(akey+".path", "is required")
			}
			if m.Kind != "onnx" {
				c.add(akey, "only kind \"onnx\" takes adapters")
			}
		}
	}
	// An alias must not shadow a real version of the same model.
	for ma, v := range aliases {
		name, alias, _ := strings.Cut(ma, "/")
		if versions[name+"@"+alias] {
			c.add("models", "alias %q of model %s (version %s) hides a version of the same name", alias, name, v)
		}
	}
}

func (c *checker) peers(list []Peer) {
	names := map[string]bool{}
	for i, p := range list {
		key := fmt.Sprintf("peers[%d]", i)
		c.issues = append(c.issues, CheckPeer(key, p)...)
		if names[p.Name] {
			c.add(key+".name", "peer %q defined twice", p.Name)
		}
		names[p.Name] = true
	}
}

// CheckPeer validates one peer; key prefixes the issues.
func CheckPeer(key string, p Peer) []Issue {
	c := &checker{}
	c.name(key+".name", p.Name, NameLenMax)
	if _, err := netip.ParseAddrPort(p.Address); err != nil {
		c.add(key+".address", "%q is not an IP:port address", p.Address)
	}
	c.labels(key+".labels", p.Labels)
	return c.issues
}

func (c *checker) control(ctl *Control) {
	if sock, ok := strings.CutPrefix(ctl.AdminListen, "unix:"); ok {
		if sock == "" {
			c.add("control.admin_listen", "unix socket path is empty")
		}
	} else if host, port, err := net.SplitHostPort(ctl.AdminListen); err != nil {
		c.add("control.admin_listen", "%q is neither host:port nor unix:/path", ctl.AdminListen)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		c.add("control.admin_listen", "bad port %q", port)
	} else if !IsLocalListen(ctl.AdminListen) && ctl.AdminToken == "" {
		c.add("control.admin_token", "is required when admin_listen (%s) is not loopback or a unix socket", host)
	}
	c.oneOf("control.store", ctl.Store, "embedded", "nats")
	if ctl.DataDir == "" {
		c.add("control.data_dir", "is required")
	}
}

// IsLocalListen reports whether an admin_listen value is reachable only from
// this host: a unix socket, or a loopback IP or "localhost".
func IsLocalListen(listen string) bool {
	if strings.HasPrefix(listen, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

var semverish = regexp.MustCompile(`^v?\d+(\.\d+){0,2}(-[0-9A-Za-z.\-]+)?$`)

// CheckVersionPattern checks a route's version matcher: an exact version
// ("1.0.0"), a glob ("1.*") or a semver range ("^1.2", ">=1, <2", "~1.4").
func CheckVersionPattern(p string) error {
	if len(p) > ModelVersionLenMax {
		return fmt.Errorf("%q is longer than %d bytes", p, ModelVersionLenMax)
	}
	switch {
	case strings.ContainsAny(p, "^~<>=,"):
		for _, part := range strings.Split(p, ",") {
			part = strings.TrimSpace(part)
			v := strings.TrimLeft(part, "^~<>= ")
			op := strings.TrimSpace(part[:len(part)-len(v)])
			switch op {
			case "^", "~", ">=", "<=", ">", "<", "=", "":
			default:
				return fmt.Errorf("%q: unknown operator %q", p, op)
			}
			if !semverish.MatchString(v) {
				return fmt.Errorf("%q: %q is not a version", p, v)
			}
		}
	case strings.Contains(p, "*"):
		if !regexp.MustCompile(`^[0-9A-Za-z.\-*]+$`).MatchString(p) {
			return fmt.Errorf("%q is not a valid glob", p)
		}
	default:
		if !nameRe.MatchString(p) {
			return fmt.Errorf("%q is not a valid version", p)
		}
	}
	return nil
}
