package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Issue is one validation failure; Key is the path of the offending value.
type Issue struct {
	Key string
	Msg string
}

func (i Issue) Error() string { return i.Key + ": " + i.Msg }

type checker struct{ issues []Issue }

func (c *checker) add(key, format string, args ...any) {
	c.issues = append(c.issues, Issue{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (c *checker) rangeInt(key string, v, lo, hi int) {
	if v < lo || v > hi {
		c.add(key, "%d is out of range %d..=%d", v, lo, hi)
	}
}

func (c *checker) count(key string, n, max int) {
	if n > max {
		c.add(key, "%d entries; at most %d", n, max)
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

// token checks a name: 1..=lenMax printable ASCII characters, no spaces
// (the engine's rule for names and wire strings).
func (c *checker) token(key, v string, lenMax int) {
	ok := v != "" && len(v) <= lenMax
	for i := 0; ok && i < len(v); i++ {
		ok = v[i] > ' ' && v[i] < 0x7f
	}
	if !ok {
		c.add(key, "%q must be 1 to %d printable ASCII characters, no spaces", v, lenMax)
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
	c.ioURing(&cfg.IOUring, cfg.Engine.RxBurstMax)
	shards := c.shards(cfg.Shards, len(cfg.Engine.Workers))
	c.routes(cfg.Routes, shards)
	c.models(cfg.Models)
	c.backends(cfg.Backends)
	c.openai(&cfg.OpenAI, cfg.Models)
	c.auth(&cfg.Auth, len(cfg.Tenants))
	c.tracing(&cfg.Tracing)
	c.tenants(cfg.Tenants)
	c.published(cfg)
	c.peers(cfg.Peers)
	c.control(&cfg.Control)
	c.frontdoor(&cfg.Frontdoor, cfg.Engine.Workers)
	c.fleet(&cfg.Fleet, cfg.Control.Store == "nats")
	c.jobs(&cfg.Jobs, &cfg.Fleet, &cfg.Engine)
	c.backendJobs(cfg)
	c.dpdk(cfg.DPDK)
	return c.issues
}

// Fleet limits.
const (
	FleetServersMax     = 16
	FleetReplicasMax    = 5 // JetStream's own limit
	BucketPrefixLenMax  = 32
	FleetTimeoutMsMax   = 60_000
	ResyncIntervalMsMin = 100
	ResyncIntervalMsMax = 3_600_000
	SettleMsMax         = 10_000
	CheckIntervalMsMin  = 20
	CheckIntervalMsMax  = 10_000
	FleetHistoryMax     = 4096 // natskv.HistoryMax
)

var bucketPrefixRe = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (c *checker) fleet(f *Fleet, used bool) {
	if used && len(f.Servers) == 0 {
		c.add("fleet.servers", "is required when control.store is \"nats\"")
	}
	c.count("fleet.servers", len(f.Servers), FleetServersMax)
	for i, s := range f.Servers {
		if !strings.HasPrefix(s, "nats://") && !strings.HasPrefix(s, "tls://") || len(s) <= len("nats://") {
			c.add(fmt.Sprintf("fleet.servers[%d]", i), "%q is not a nats://host:port or tls://host:port URL", s)
		}
	}
	if len(f.Name) > lim.NameLenMax {
		c.add("fleet.name", "longer than %d bytes", lim.NameLenMax)
	}
	if len(f.BucketPrefix) > BucketPrefixLenMax || !bucketPrefixRe.MatchString(f.BucketPrefix) {
		c.add("fleet.bucket_prefix", "%q must be 1..=%d of [A-Za-z0-9_-]", f.BucketPrefix, BucketPrefixLenMax)
	}
	c.rangeInt("fleet.replicas", f.Replicas, 1, FleetReplicasMax)
	c.rangeInt("fleet.connect_timeout_ms", f.ConnectTimeoutMs, 1, FleetTimeoutMsMax)
	c.rangeInt("fleet.op_timeout_ms", f.OpTimeoutMs, 1, FleetTimeoutMsMax)
	c.rangeInt("fleet.resync_interval_ms", f.ResyncIntervalMs, ResyncIntervalMsMin, ResyncIntervalMsMax)
	c.rangeInt("fleet.settle_ms", f.SettleMs, 0, SettleMsMax)
	c.rangeInt("fleet.check_interval_ms", f.CheckIntervalMs, CheckIntervalMsMin, CheckIntervalMsMax)
	c.rangeInt("fleet.history", f.History, 1, FleetHistoryMax)
}

func (c *checker) engine(e *Engine) {
	if len(e.Workers) == 0 || len(e.Workers) > lim.WorkersMax {
		c.add("engine.workers", "needs 1..=%d cores, got %d", lim.WorkersMax, len(e.Workers))
	}
	online, desc := OnlineCPUs()
	for i, core := range e.Workers {
		key := fmt.Sprintf("engine.workers[%d]", i)
		if !online[core] {
			c.add(key, "core %d does not exist or is offline (online: %s)", core, desc)
		}
		if slices.Contains(e.Workers[:i], core) {
			c.add(key, "core %d listed twice", core)
		}
	}
	c.oneOf("engine.transport", e.Transport, "io_uring", "dpdk", "rdma")
	c.rangeInt("engine.rx_burst_max", e.RxBurstMax, 1, lim.RxBurstMax)
	c.oneOf("engine.hugepages", e.Hugepages, "auto", "required", "off")
	c.oneOf("engine.poll", e.Poll, "busy", "adaptive")
	c.oneOf("engine.json_schema_format", e.JSONSchemaFormat, "annotation", "assertion")
	c.rangeInt("engine.spin_us", e.SpinUs, 0, lim.SpinUsMax)
	c.rangeInt("engine.forward_timeout_ms", e.ForwardTimeoutMs, 1, lim.ForwardTimeoutMsMax)
	c.rangeInt("engine.negotiation_ttl_ms", e.NegotiationTTLMs, lim.NegotiationTTLMsMin, lim.NegotiationTTLMsMax)
}

// CPUOnlinePath lists the online CPUs, e.g. "0-3,6".
const CPUOnlinePath = "/sys/devices/system/cpu/online"

// OnlineCPUs returns the cores that exist and are online. It reads the
// kernel's list rather than the process's affinity mask: under isolcpus or
// a unit's CPUAffinity the daemon itself may not run on the worker cores.
func OnlineCPUs() (map[int]bool, string) {
	if b, err := os.ReadFile(CPUOnlinePath); err == nil {
		text := strings.TrimSpace(string(b))
		if set, ok := parseCPUList(text); ok {
			return set, text
		}
	}
	n := runtime.NumCPU()
	set := make(map[int]bool, n)
	for i := 0; i < n; i++ {
		set[i] = true
	}
	return set, fmt.Sprintf("0-%d", n-1)
}

// parseCPUList parses the kernel's CPU list format ("0-3,6,8-9").
func parseCPUList(s string) (map[int]bool, bool) {
	set := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, false
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 1<<16 {
				return nil, false
			}
		}
		for i := a; i <= b; i++ {
			set[i] = true
		}
	}
	return set, len(set) > 0
}

func isPow2(v int) bool { return v > 0 && v&(v-1) == 0 }

func (c *checker) ioURing(u *IOUring, rxBurst int) {
	if _, err := netip.ParseAddrPort(u.Listen); err != nil {
		c.add("io_uring.listen", "%q is not an IP:port address", u.Listen)
	}
	c.rangeInt("io_uring.ring_entries", u.RingEntries, lim.RingEntriesMin, lim.RingEntriesMax)
	if !isPow2(u.RingEntries) {
		c.add("io_uring.ring_entries", "%d is not a power of two", u.RingEntries)
	}
	c.rangeInt("io_uring.rx_buffers", u.RxBuffers, lim.PoolBuffersMin, lim.PoolBuffersMax)
	if !isPow2(u.RxBuffers) {
		c.add("io_uring.rx_buffers", "%d is not a power of two (buffer rings need one)", u.RxBuffers)
	}
	c.rangeInt("io_uring.tx_buffers", u.TxBuffers, lim.PoolBuffersMin, lim.PoolBuffersMax)
	if u.TxBuffers < rxBurst {
		c.add("io_uring.tx_buffers", "%d is below engine.rx_burst_max (%d): every received frame gets an answer", u.TxBuffers, rxBurst)
	}
	c.rangeInt("io_uring.buffer_size", u.BufferSize, lim.BufferSizeMin, lim.BufferSizeMax)
	if u.BufferSize%lim.BufferAlign != 0 {
		c.add("io_uring.buffer_size", "%d is not a multiple of %d", u.BufferSize, lim.BufferAlign)
	}
	c.tcp(u)
}

// The engine's TCP_TIMEOUT_MS_MIN and TCP_VERIFIED_RESERVE_PCT_MAX
// (config/limits.rs): the shortest frame and send timeout, and the largest
// share of the smallest slot class kept for verified frames.
const (
	tcpTimeoutMsMin          = 10
	tcpVerifiedReservePctMax = 90
)

// tcp checks the TCP keys of [io_uring] as the engine does.
func (c *checker) tcp(u *IOUring) {
	if u.TCPListen != "" {
		if _, err := netip.ParseAddrPort(u.TCPListen); err != nil {
			c.add("io_uring.tcp_listen", "%q is not an IP:port address (or \"\" for no TCP)", u.TCPListen)
		}
	}
	c.rangeInt("io_uring.tcp_connections_max", u.TCPConnectionsMax, 1, lim.TCPConnectionsMax)
	c.rangeInt("io_uring.tcp_idle_timeout_ms", u.TCPIdleTimeoutMs, 1, lim.TCPIdleTimeoutMsMax)
	c.rangeInt("io_uring.tcp_frame_timeout_ms", u.TCPFrameTimeoutMs, tcpTimeoutMsMin, lim.TCPIdleTimeoutMsMax)
	c.rangeInt("io_uring.tcp_send_timeout_ms", u.TCPSendTimeoutMs, tcpTimeoutMsMin, lim.TCPIdleTimeoutMsMax)
	c.rangeInt("io_uring.tcp_connections_per_source_max", u.TCPConnectionsPerSourceMax, 1, lim.TCPConnectionsMax)
	c.rangeInt("io_uring.tcp_large_slots_per_source_pct", u.TCPLargeSlotsPerSourcePct, 1, 100)
	c.rangeInt("io_uring.tcp_large_slots_per_tenant_pct", u.TCPLargeSlotsPerTenantPct, 1, 100)
	c.rangeInt("io_uring.tcp_verified_reserve_pct", u.TCPVerifiedReservePct, 0, tcpVerifiedReservePctMax)
	c.rangeInt("io_uring.tcp_pipeline_max", u.TCPPipelineMax, 1, lim.TCPPipelineMax)
	c.oneOf("io_uring.tcp_send_zc", u.TCPSendZC, "auto", "on", "off")
	if len(u.TCPSlots) == 0 || len(u.TCPSlots) > lim.TCPSlotClassesMax {
		c.add("io_uring.tcp_slots", "1 to %d slot classes", lim.TCPSlotClassesMax)
		return
	}
	largest, pool := 0, int64(0)
	for i, s := range u.TCPSlots {
		key := fmt.Sprintf("io_uring.tcp_slots[%d]", i)
		c.rangeInt(key+".size", s.Size, lim.TCPSlotSizeMin, lim.TCPSlotSizeMax)
		if s.Size%lim.TCPSlotSizeMin != 0 {
			c.add(key+".size", "%d is not a multiple of %d", s.Size, lim.TCPSlotSizeMin)
		}
		if i > 0 && s.Size <= u.TCPSlots[i-1].Size {
			c.add(key+".size", "slot classes must be listed smallest first, each larger than the last")
		}
		c.rangeInt(key+".count", s.Count, 1, lim.TCPSlotCountMax)
		largest = max(largest, s.Size)
		pool += 2 * int64(s.Size) * int64(s.Count)
	}
	if pool > lim.TCPPoolBytesMax {
		c.add("io_uring.tcp_slots", "%d bytes of slots per worker (receive and reply) exceed %d", pool, lim.TCPPoolBytesMax)
	}
	if u.TCPFrameLenMax != 0 && (u.TCPFrameLenMax < fixedHeaderLen || u.TCPFrameLenMax > largest) {
		c.add("io_uring.tcp_frame_len_max", "%d is out of range %d..=%d (at most the largest tcp_slots size)", u.TCPFrameLenMax, fixedHeaderLen, largest)
	}
}

func (c *checker) shards(list []Shard, workers int) map[string]bool {
	c.count("shards", len(list), lim.ShardsMax)
	names := map[string]bool{}
	for i, s := range list {
		key := fmt.Sprintf("shards[%d]", i)
		c.token(key+".name", s.Name, lim.NameLenMax)
		if names[s.Name] {
			c.add(key+".name", "shard %q defined twice", s.Name)
		}
		names[s.Name] = true
		c.rangeInt(key+".max_concurrency", s.MaxConcurrency, 1, lim.MaxConcurrencyMax)
		c.rangeInt(key+".queue_depth", s.QueueDepth, 1, lim.QueueDepthMax)
		c.batch(key, s.BatchMax, s.BatchDelayUs)
		if s.BatchMax > s.QueueDepth {
			c.add(key+".batch_max", "%d is above queue_depth (%d): a batch is taken from the shard's queue", s.BatchMax, s.QueueDepth)
		}
		if s.Workers != nil && len(s.Workers) == 0 {
			c.add(key+".workers", "must not be empty (leave it out for all workers)")
		}
		for j, w := range s.Workers {
			if w < 0 || w >= workers {
				c.add(fmt.Sprintf("%s.workers[%d]", key, j), "worker %d does not exist (%d configured)", w, workers)
			}
		}
	}
	return names
}

func (c *checker) tracing(t *Tracing) {
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		c.add("tracing.sample_ratio", "%v is not a share from 0 to 1", t.SampleRatio)
	}
	c.rangeInt("tracing.ring_spans", t.RingSpans, 1, 65_536)
	c.rangeInt("tracing.export_interval_ms", t.ExportIntervalMs, 10, 60_000)
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			c.add("tracing.endpoint", "%q is not an http(s) URL such as http://127.0.0.1:4318", t.Endpoint)
		}
	}
}

func (c *checker) routes(list []Route, shards map[string]bool) {
	c.count("routes", len(list), lim.RoutesMax)
	names := map[string]bool{}
	// The engine locates every content path in one walk of a section over a
	// trie of them: the root plus each distinct path prefix.
	nodes := map[string]bool{}
	nodesFull := false
	for i, r := range list {
		key := fmt.Sprintf("routes[%d]", i)
		c.token(key+".name", r.Name, lim.NameLenMax)
		if names[r.Name] {
			c.add(key+".name", "route %q defined twice", r.Name)
		}
		names[r.Name] = true
		if r.Version != "" {
			if err := CheckVersionPattern(r.Version); err != nil {
				c.add(key+".version", "%v", err)
			}
		}
		if !shards[r.Shard] {
			c.add(key+".shard", "unknown shard %q", r.Shard)
		}
		c.count(key+".content", len(r.Content), lim.ContentMax)
		for j, e := range r.Content {
			if err := CheckContent(e); err != nil {
				c.add(fmt.Sprintf("%s.content[%d]", key, j), "%v", err)
				continue
			}
			for _, p := range contentPrefixes(e) {
				nodes[p] = true
			}
			if !nodesFull && len(nodes)+1 > lim.ContentPathNodesMax {
				nodesFull = true
				c.add(fmt.Sprintf("%s.content[%d]", key, j),
					"the content paths of all routes need more than %d trie nodes", lim.ContentPathNodesMax)
			}
		}
	}
}

var (
	contentRe = regexp.MustCompile(`^\s*(\$(?:\.[A-Za-z0-9_-]+|\[[0-9]+\]|\["(?:[^"\\]|\\.)*"\])*)\s*(==|!=)\s*(.*?)\s*$`)
	segmentRe = regexp.MustCompile(`\.[A-Za-z0-9_-]+|\[[0-9]+\]|\["(?:[^"\\]|\\.)*"\]`)
)

// contentPrefixes are the trie keys of a checked condition's path, one per
// prefix: `.a` and `["a"]` name the same member, `[01]` element 1.
func contentPrefixes(e string) []string {
	m := contentRe.FindStringSubmatch(e)
	if m == nil {
		return nil
	}
	var out []string
	prefix := ""
	for _, seg := range segmentRe.FindAllString(m[1], -1) {
		switch {
		case strings.HasPrefix(seg, "."):
			prefix += "k" + seg[1:] + "\x00"
		case strings.HasPrefix(seg, "[\""):
			var name string
			if json.Unmarshal([]byte(seg[1:len(seg)-1]), &name) != nil {
				return out
			}
			prefix += "k" + name + "\x00"
		default:
			n, err := strconv.ParseUint(seg[1:len(seg)-1], 10, 64)
			if err != nil {
				return out
			}
			prefix += "i" + strconv.FormatUint(n, 10) + "\x00"
		}
		out = append(out, prefix)
	}
	return out
}

// CheckContent checks a route's content condition: a JSON path ($, .name,
// [index], ["any name"]), == or !=, and a JSON scalar literal. The engine
// compiles the same grammar; this check only makes errors point at the file.
func CheckContent(e string) error {
	m := contentRe.FindStringSubmatch(e)
	if m == nil {
		return fmt.Errorf("content %q: want PATH == LITERAL or PATH != LITERAL, PATH like $.intent", e)
	}
	if n := len(segmentRe.FindAllString(m[1], -1)); n > lim.ContentPathDepthMax {
		return fmt.Errorf("content %q: path deeper than %d", e, lim.ContentPathDepthMax)
	}
	var v any
	if err := json.Unmarshal([]byte(m[3]), &v); err != nil {
		return fmt.Errorf("content %q: literal is not JSON: %w", e, err)
	}
	switch v.(type) {
	case string, float64, bool, nil:
		return nil
	}
	return fmt.Errorf("content %q: literal must be a string, number, true, false or null", e)
}

type nameVer struct{ name, v string }

// aliasOwners are the first two models (indexes) holding an alias.
type aliasOwners struct{ first, second int }

func (c *checker) models(list []Model) {
	c.count("models", len(list), lim.ModelsMax)
	// Maps instead of pairwise scans: the first model of each version, and
	// the first two of each alias.
	versions := make(map[nameVer]int, len(list))
	aliases := map[nameVer]*aliasOwners{}
	for i, m := range list {
		if _, ok := versions[nameVer{m.Name, m.Version}]; !ok {
			versions[nameVer{m.Name, m.Version}] = i
		}
		for _, a := range m.Aliases {
			o := aliases[nameVer{m.Name, a}]
			switch {
			case o == nil:
				aliases[nameVer{m.Name, a}] = &aliasOwners{i, -1}
			case o.second < 0 && o.first != i:
				o.second = i
			}
		}
	}
	for i, m := range list {
		key := fmt.Sprintf("models[%d]", i)
		c.token(key+".name", m.Name, lim.ModelNameLenMax)
		c.token(key+".version", m.Version, lim.ModelVersionLenMax)
		if versions[nameVer{m.Name, m.Version}] != i {
			c.add(key+".version", "model %s version %s defined twice", m.Name, m.Version)
		}
		c.oneOf(key+".kind", m.Kind, "onnx", "null", "echo", ModelKindBackend)
		if m.Kind == "onnx" && m.Path == "" {
			c.add(key+".path", "is required for kind \"onnx\"")
		}
		c.modelBackend(key, &m)
		for j, a := range m.Aliases {
			akey := fmt.Sprintf("%s.aliases[%d]", key, j)
			c.token(akey, a, lim.ModelVersionLenMax)
			// The first model (in list order) the alias clashes with: one
			// whose version it is, or another holding the same alias.
			clash := -1
			if v, ok := versions[nameVer{m.Name, a}]; ok {
				clash = v
			}
			if o := aliases[nameVer{m.Name, a}]; o != nil {
				other := o.first
				if other == i {
					other = o.second
				}
				if other >= 0 && (clash < 0 || other < clash) {
					clash = other
				}
			}
			if clash >= 0 {
				c.add(akey, "alias %q of model %s already names version %s", a, m.Name, list[clash].Version)
			}
		}
		if m.BatchMax != nil || m.BatchDelayUs != nil {
			c.modelBatch(key, &m)
		}
		c.count(key+".aliases", len(m.Aliases), lim.AliasesMax)
		c.count(key+".adapters", len(m.Adapters), lim.AdaptersMax)
		for j, a := range m.Adapters {
			akey := fmt.Sprintf("%s.adapters[%d]", key, j)
			c.token(akey+".id", a.ID, lim.AdapterLenMax)
			if a.Path == "" {
				c.add(akey+".path", "is required")
			}
		}
	}
}

// batch checks batch_max and batch_delay_us under key, as the engine does.
func (c *checker) batch(key string, batchMax, delayUs int) {
	c.rangeInt(key+".batch_max", batchMax, 1, lim.BatchMaxMax)
	c.rangeInt(key+".batch_delay_us", delayUs, 0, lim.BatchDelayUsMax)
	if delayUs > 0 && batchMax == 1 {
		c.add(key+".batch_delay_us", "needs batch_max above 1: a request waits only for others to batch with")
	}
}

func (c *checker) modelBatch(key string, m *Model) {
	if m.Kind != "onnx" {
		k := ".batch_max"
		if m.BatchMax == nil {
			k = ".batch_delay_us"
		}
		c.add(key+k, "only onnx models batch")
		return
	}
	batchMax, delay := 1, 0
	if m.BatchMax != nil {
		batchMax = *m.BatchMax
	}
	if m.BatchDelayUs != nil {
		delay = *m.BatchDelayUs
	}
	c.batch(key, batchMax, delay)
	if delay > 0 && m.BatchMax == nil {
		c.add(key+".batch_delay_us", "needs batch_max on the model too (a delay without a batch size)")
	}
}

func (c *checker) peers(list []Peer) {
	c.count("peers", len(list), lim.PeersMax)
	for i, p := range list {
		key := fmt.Sprintf("peers[%d]", i)
		c.issues = append(c.issues, CheckPeer(key, p)...)
		if slices.ContainsFunc(list[:i], func(o Peer) bool { return o.Name == p.Name }) {
			c.add(key+".name", "peer %q defined twice", p.Name)
		}
	}
}

// CheckPeer validates one peer; key prefixes the issues.
func CheckPeer(key string, p Peer) []Issue {
	c := &checker{}
	c.token(key+".name", p.Name, lim.NameLenMax)
	if _, err := netip.ParseAddrPort(p.Address); err != nil {
		c.add(key+".address", "%q is not an IP:port address", p.Address)
	}
	if p.TCPAddress != "" {
		if _, err := netip.ParseAddrPort(p.TCPAddress); err != nil {
			c.add(key+".tcp_address", "%q is not an IP:port address", p.TCPAddress)
		}
	}
	switch p.Transport {
	case "", "udp", "rdma":
	default:
		c.add(key+".transport", "%q is neither \"udp\" nor \"rdma\"", p.Transport)
	}
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
		c.add("control.admin_token", "is required when admin_listen (%s) is not loopback or a unix socket", or(host, "all addresses"))
	}
	c.oneOf("control.store", ctl.Store, "embedded", "nats")
	c.rangeInt("control.drain_ms", ctl.DrainMs, 0, lim.DrainMsMax)
	if ctl.DataDir == "" {
		c.add("control.data_dir", "is required")
	}
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
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

var (
	semverOp  = regexp.MustCompile(`^(\^|~|>=|<=|>|<|=)?\s*(.*)$`)
	semverVer = regexp.MustCompile(`^(\d+|[*xX])(\.(\d+|[*xX])){0,2}(-[0-9A-Za-z.\-]+)?(\+[0-9A-Za-z.\-]+)?$`)
)

// CheckVersionPattern checks a route's version matcher as the engine reads
// it: a semver range when it starts with ^ ~ < > = or holds a comma
// ("^1.2", ">=1, <2"), else an exact version or glob ("1.0.0", "1.*").
func CheckVersionPattern(p string) error {
	t := strings.TrimSpace(p)
	if t == "" {
		return fmt.Errorf("empty version matcher")
	}
	if !strings.ContainsAny(t[:1], "^~<>=") && !strings.Contains(t, ",") {
		return nil // glob or exact text
	}
	for _, part := range strings.Split(t, ",") {
		m := semverOp.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil || !semverVer.MatchString(m[2]) {
			return fmt.Errorf("bad semver range %q: %q is not a version", t, strings.TrimSpace(part))
		}
	}
	return nil
}
