package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Backend is one [[backends]] entry: a pool of model-server endpoints
// (llama.cpp's OpenAI server, a KServe v2 HTTP server) that the engine
// dispatches the OpenAI front door's requests for kind = "backend" models
// to.
type Backend struct {
	Name string `toml:"name" json:"name"`
	// Protocol is what the endpoints speak: "openai" or "kserve-http".
	Protocol string `toml:"protocol" json:"protocol"`
	// Endpoints are base URLs, http:// or https:// with host and port and
	// no path, each once.
	Endpoints []string          `toml:"endpoints" json:"endpoints"`
	Labels    map[string]string `toml:"labels" json:"labels,omitempty"`
	// Models the pool serves, by the name it serves them as; empty: asked
	// of the endpoints (GET /v1/models).
	Models []string `toml:"models" json:"models,omitempty"`
	// MaxConcurrency: requests in flight per endpoint.
	MaxConcurrency int `toml:"max_concurrency" json:"max_concurrency"`
	// QueueDepth: requests waiting for an endpoint, over the whole pool.
	QueueDepth       int `toml:"queue_depth" json:"queue_depth"`
	ConnectTimeoutMs int `toml:"connect_timeout_ms" json:"connect_timeout_ms"`
	// RequestTimeoutMs bounds an upstream request that names no timeout.
	RequestTimeoutMs int `toml:"request_timeout_ms" json:"request_timeout_ms"`
	HealthIntervalMs int `toml:"health_interval_ms" json:"health_interval_ms"`
	// EjectErrors consecutive failures eject an endpoint for EjectMs, which
	// doubles per ejection up to EjectMaxMs.
	EjectErrors int `toml:"eject_errors" json:"eject_errors"`
	EjectMs     int `toml:"eject_ms" json:"eject_ms"`
	EjectMaxMs  int `toml:"eject_max_ms" json:"eject_max_ms"`
	// Retries: extra attempts before the first byte reached the client,
	// at most RetryBudgetPct percent of requests.
	Retries        int `toml:"retries" json:"retries"`
	RetryBudgetPct int `toml:"retry_budget_pct" json:"retry_budget_pct"`
}

// OpenAI is the [openai] table: the OpenAI API the front door serves
// (/v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models) on
// frontdoor.http_listen.
type OpenAI struct {
	// DefaultVersions maps a model to the version or alias a request
	// without X-Model-Version gets; a model not listed requires the header.
	DefaultVersions map[string]string `toml:"default_versions" json:"default_versions,omitempty"`
}

// ModelKindBackend is the kind of a model served by [[backends]] (through
// the OpenAI front door), not loaded by the engine.
const ModelKindBackend = "backend"

// Defaults and limits of [[backends]] entries, as the engine applies them.
// They are not in ffi/include/sluice.h (yet): when the engine exports them
// they move into Limits.
const (
	BackendMaxConcurrencyDefault   = 8
	BackendQueueDepthDefault       = 64
	BackendConnectTimeoutMsDefault = 1000
	BackendRequestTimeoutMsDefault = 120_000
	BackendHealthIntervalMsDefault = 1000
	BackendEjectErrorsDefault      = 3
	BackendEjectMsDefault          = 1000
	BackendEjectMaxMsDefault       = 30_000
	BackendRetriesDefault          = 1
	BackendRetryBudgetPctDefault   = 20

	BackendNameLenMax        = 64
	BackendEndpointsMax      = 64
	BackendMaxConcurrencyMax = 4096
	BackendQueueDepthMax     = 65_536
	BackendConnectTimeoutMax = 60_000
	BackendRequestTimeoutMax = 3_600_000
	BackendHealthIntervalMin = 100
	BackendHealthIntervalMax = 600_000
	BackendEjectErrorsMax    = 1000
	BackendEjectMsMax        = 600_000
	BackendEjectMaxMsMax     = 3_600_000
	BackendRetriesMax        = 8
	// UpstreamLenMax bounds a backend model's upstream name (the name the
	// backend serves it as: an id such as "Qwen/Qwen3-72B" or a file name).
	UpstreamLenMax = 256
)

var backendNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// backendDefaults fills the keys an entry leaves out; a key written as 0
// stays 0 (and fails validation where 0 is out of range).
func (b *Backend) backendDefaults(has func(string) bool) {
	for _, d := range []struct {
		key string
		p   *int
		v   int
	}{
		{"max_concurrency", &b.MaxConcurrency, BackendMaxConcurrencyDefault},
		{"queue_depth", &b.QueueDepth, BackendQueueDepthDefault},
		{"connect_timeout_ms", &b.ConnectTimeoutMs, BackendConnectTimeoutMsDefault},
		{"request_timeout_ms", &b.RequestTimeoutMs, BackendRequestTimeoutMsDefault},
		{"health_interval_ms", &b.HealthIntervalMs, BackendHealthIntervalMsDefault},
		{"eject_errors", &b.EjectErrors, BackendEjectErrorsDefault},
		{"eject_ms", &b.EjectMs, BackendEjectMsDefault},
		{"eject_max_ms", &b.EjectMaxMs, BackendEjectMaxMsDefault},
		{"retries", &b.Retries, BackendRetriesDefault},
		{"retry_budget_pct", &b.RetryBudgetPct, BackendRetryBudgetPctDefault},
	} {
		if !has(d.key) {
			*d.p = d.v
		}
	}
}

// UnmarshalJSON implements json.Unmarshaler with the engine's defaults: a
// field left out takes its default, as in TOML.
func (b *Backend) UnmarshalJSON(data []byte) error {
	type raw Backend
	var present map[string]any
	if err := strictUnmarshal(data, &present); err != nil {
		return err
	}
	var r raw
	if err := strictUnmarshal(data, &r); err != nil {
		return err
	}
	*b = Backend(r)
	b.backendDefaults(func(k string) bool { _, ok := present[k]; return ok })
	return nil
}

func (c *checker) backends(list []Backend) {
	names := make(map[string]bool, len(list))
	for i := range list {
		b := &list[i]
		key := fmt.Sprintf("backends[%d]", i)
		if len(b.Name) == 0 || len(b.Name) > BackendNameLenMax || !backendNameRe.MatchString(b.Name) {
			c.add(key+".name", "%q must be 1 to %d characters of [A-Za-z0-9._-]", b.Name, BackendNameLenMax)
		}
		if names[b.Name] {
			c.add(key+".name", "backend %q defined twice", b.Name)
		}
		names[b.Name] = true
		c.oneOf(key+".protocol", b.Protocol, "openai", "kserve-http")
		if len(b.Endpoints) == 0 {
			c.add(key+".endpoints", "at least one endpoint is required")
		}
		c.count(key+".endpoints", len(b.Endpoints), BackendEndpointsMax)
		seen := make(map[string]bool, len(b.Endpoints))
		for j, e := range b.Endpoints {
			ekey := fmt.Sprintf("%s.endpoints[%d]", key, j)
			canon, err := CheckEndpoint(e)
			if err != nil {
				c.add(ekey, "%v", err)
				continue
			}
			if seen[canon] {
				c.add(ekey, "%q is listed twice in the pool", e)
			}
			seen[canon] = true
		}
		mseen := make(map[string]bool, len(b.Models))
		for j, m := range b.Models {
			mkey := fmt.Sprintf("%s.models[%d]", key, j)
			c.token(mkey, m, UpstreamLenMax)
			if mseen[m] {
				c.add(mkey, "model %q listed twice", m)
			}
			mseen[m] = true
		}
		c.rangeInt(key+".max_concurrency", b.MaxConcurrency, 1, BackendMaxConcurrencyMax)
		c.rangeInt(key+".queue_depth", b.QueueDepth, 0, BackendQueueDepthMax)
		c.rangeInt(key+".connect_timeout_ms", b.ConnectTimeoutMs, 1, BackendConnectTimeoutMax)
		c.rangeInt(key+".request_timeout_ms", b.RequestTimeoutMs, 1, BackendRequestTimeoutMax)
		c.rangeInt(key+".health_interval_ms", b.HealthIntervalMs, BackendHealthIntervalMin, BackendHealthIntervalMax)
		c.rangeInt(key+".eject_errors", b.EjectErrors, 1, BackendEjectErrorsMax)
		c.rangeInt(key+".eject_ms", b.EjectMs, 1, BackendEjectMsMax)
		c.rangeInt(key+".eject_max_ms", b.EjectMaxMs, max(b.EjectMs, 1), BackendEjectMaxMsMax)
		c.rangeInt(key+".retries", b.Retries, 0, BackendRetriesMax)
		c.rangeInt(key+".retry_budget_pct", b.RetryBudgetPct, 0, 100)
	}
}

// CheckEndpoint checks a backend endpoint: an http:// or https:// URL with
// a host and a port and nothing after them (no path, not even "/", no
// query, no user). It returns the endpoint as compared for duplicates
// (scheme and host in lower case).
func CheckEndpoint(e string) (string, error) {
	u, err := url.Parse(e)
	if err != nil {
		return "", fmt.Errorf("%q is not a URL: %v", e, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q must start with http:// or https://", e)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return "", fmt.Errorf("%q names no host", e)
	}
	if u.User != nil {
		return "", fmt.Errorf("%q must not hold a user or password", e)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("%q needs a port (1..=65535), e.g. http://127.0.0.1:8101", e)
	}
	if u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(e, "#") {
		return "", fmt.Errorf("%q must be scheme://host:port with no path, query or fragment", e)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// modelBackend checks the keys of [[models]] that concern backends: a
// backend model names no path, and only a backend model has an upstream.
func (c *checker) modelBackend(key string, m *Model) {
	if m.Kind == ModelKindBackend {
		if m.Path != "" {
			c.add(key+".path", "a kind = \"backend\" model is served by [[backends]]: it has no path")
		}
		if m.Upstream != "" {
			c.token(key+".upstream", m.Upstream, UpstreamLenMax)
		}
		return
	}
	if m.Upstream != "" {
		c.add(key+".upstream", "only kind = \"backend\" models have an upstream (this one is %q)", m.Kind)
	}
}

// openai checks [openai]: each default_versions key names a configured
// model, and its value one of that model's versions or aliases.
func (c *checker) openai(o *OpenAI, models []Model) {
	versions := map[string][]string{} // model -> versions and aliases
	for _, m := range models {
		versions[m.Name] = append(append(versions[m.Name], m.Version), m.Aliases...)
	}
	for name, v := range o.DefaultVersions {
		key := "openai.default_versions." + name
		known, ok := versions[name]
		if !ok {
			c.add(key, "model %q is not configured ([[models]])", name)
			continue
		}
		found := false
		for _, k := range known {
			found = found || k == v
		}
		if !found {
			c.add(key, "%q is neither a version nor an alias of model %s (it has %s)", v, name, strings.Join(quoteAll(known), ", "))
		}
	}
}

// backendJobs checks that jobs whose model is a backend model can reach
// the OpenAI front door: frontdoor.http_listen must be set. A stream's
// models table and the literal last tokens of its filter subjects name the
// models its jobs may ask for.
func (c *checker) backendJobs(cfg *Config) {
	if cfg.Frontdoor.HTTPListen != "" {
		return
	}
	backend := map[string]bool{}
	for _, m := range cfg.Models {
		if m.Kind == ModelKindBackend {
			backend[m.Name] = true
		}
	}
	if len(backend) == 0 {
		return
	}
	const why = "is served by [[backends]], and jobs reach it through the OpenAI front door: set frontdoor.http_listen"
	for i := range cfg.Jobs.Streams {
		s := &cfg.Jobs.Streams[i]
		key := fmt.Sprintf("jobs.streams[%d]", i)
		for tok, m := range s.Models {
			if backend[m] {
				c.add(key+".models."+tok, "model %q %s", m, why)
			}
		}
		for j, f := range s.FilterSubjects {
			tok := f[strings.LastIndexByte(f, '.')+1:]
			if _, mapped := s.Models[tok]; mapped || tok == "*" || tok == ">" {
				continue
			}
			if backend[tok] {
				c.add(fmt.Sprintf("%s.filter_subjects[%d]", key, j), "model %q %s", tok, why)
			}
		}
	}
}

// ModelKind tells how the config serves model name at version (a version
// or an alias; "" takes [openai].default_versions' entry for the model):
// the kind of the version it names, or, when that names none, "backend"
// if any version of the model is a backend one (its front door answers
// for the rest), else the kind of its first version. "" when no model has
// the name.
func (cfg *Config) ModelKind(name, version string) string {
	if version == "" {
		version = cfg.OpenAI.DefaultVersions[name]
	}
	first, anyBackend := "", false
	for i := range cfg.Models {
		m := &cfg.Models[i]
		if m.Name != name {
			continue
		}
		if version != "" && m.Version == version {
			return m.Kind
		}
		if version != "" {
			for _, a := range m.Aliases {
				if a == version {
					return m.Kind
				}
			}
		}
		if first == "" {
			first = m.Kind
		}
		anyBackend = anyBackend || m.Kind == ModelKindBackend
	}
	if anyBackend {
		return ModelKindBackend
	}
	return first
}
