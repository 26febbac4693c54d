package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Jobs is the [jobs] table: durable asynchronous inference. sluiced
// consumes JetStream streams with durable pull consumers and runs each
// message through its own data plane (docs/jobs.md). The NATS connection is
// the [fleet] table's servers, creds_file and connect_timeout_ms.
type Jobs struct {
	// Concurrency bounds the requests in the data plane at once, over all
	// streams; messages held beyond it wait for a slot.
	Concurrency int `toml:"concurrency" json:"concurrency"`
	// RequestTimeoutMs bounds one request of a message without X-AI-Timeout.
	RequestTimeoutMs int `toml:"request_timeout_ms" json:"request_timeout_ms"`
	// PublishTimeoutMs bounds the wait for a result's publish ack.
	PublishTimeoutMs int `toml:"publish_timeout_ms" json:"publish_timeout_ms"`
	// NakDelayMs is the redelivery delay asked for with a retryable error.
	NakDelayMs int `toml:"nak_delay_ms" json:"nak_delay_ms"`
	// BusyRetries is how often a busy answer is resent at once (1 ms, 2 ms,
	// 4 ms ... apart) before the message is nak'ed.
	BusyRetries int `toml:"busy_retries" json:"busy_retries"`
	// FetchWaitMs is the longest a pull request waits for messages; a drain
	// takes at most this long to stop fetching.
	FetchWaitMs int `toml:"fetch_wait_ms" json:"fetch_wait_ms"`
	// DataAddress is the data plane the ingress sends to (UDP); "" is
	// io_uring.listen as the engine bound it, reached on loopback when it
	// listens on every address.
	DataAddress string      `toml:"data_address" json:"data_address,omitempty"`
	Streams     []JobStream `toml:"streams" json:"streams,omitempty"`
}

// JobStream is one [[jobs.streams]] entry: a stream, the durable consumer
// this appliance (and every other with the same entry) pulls from, and
// where results and dead letters go.
type JobStream struct {
	Stream string `toml:"stream" json:"stream"`
	// Create makes the stream, with Subjects, Storage, Replicas and
	// DuplicateWindowMs, when it does not exist. An existing stream is
	// used as it is.
	Create            bool     `toml:"create" json:"create"`
	Subjects          []string `toml:"subjects" json:"subjects,omitempty"`
	Storage           string   `toml:"storage" json:"storage"`
	Replicas          int      `toml:"replicas" json:"replicas"`
	DuplicateWindowMs int      `toml:"duplicate_window_ms" json:"duplicate_window_ms"`
	// Consumer is the durable consumer's name: one per fleet, shared, so
	// that each message is worked by one appliance.
	Consumer string `toml:"consumer" json:"consumer"`
	// FilterSubjects select the requests among the stream's subjects
	// (default: Subjects). They must not take the results or dead letters.
	FilterSubjects []string `toml:"filter_subjects" json:"filter_subjects,omitempty"`
	// MaxAckPending bounds the messages handed out and not yet acked, over
	// the whole fleet: JetStream's back-pressure.
	MaxAckPending int `toml:"max_ack_pending" json:"max_ack_pending"`
	AckWaitMs     int `toml:"ack_wait_ms" json:"ack_wait_ms"`
	// MaxDeliver bounds the deliveries of one message that may run. On
	// the last one a retryable failure is dead-lettered (gave_up); a
	// delivery past it (the last one's appliance died) is dead-lettered
	// without running. The appliance applies it, not JetStream, so no
	// message stops without an outcome. -1 is no bound: a message that
	// keeps failing retryably (a reply subject no stream stores) then runs
	// again for ever, so it is not the default.
	MaxDeliver int `toml:"max_deliver" json:"max_deliver"`
	// FetchMax is the most messages one pull request asks for.
	FetchMax int `toml:"fetch_max" json:"fetch_max"`
	// InflightMax bounds the messages this appliance holds at once
	// (default: max_ack_pending).
	InflightMax int `toml:"inflight_max" json:"inflight_max"`
	// Results and DeadLetters are subject templates: {model} is the
	// request's model, {stream} the stream's name. A message's X-Reply-To
	// header replaces Results for it, within ReplyPrefixes.
	Results     string `toml:"results" json:"results"`
	DeadLetters string `toml:"dead_letters" json:"dead_letters"`
	// ReplyPrefixes maps a tenant (Tenant or one of Tenants) to the
	// subjects its requests' X-Reply-To may name: a prefix itself or a
	// subject under it (prefix "replies.demo" allows "replies.demo.c7").
	// The results go out with the fleet's NATS credentials, so a tenant
	// not listed may not redirect them at all, and no $-subject (the
	// JetStream, KV and system APIs) is ever allowed.
	ReplyPrefixes map[string][]string `toml:"reply_prefixes" json:"reply_prefixes,omitempty"`
	// Tenant names the [[tenants]] entry requests run as (its key signs
	// them); a message's X-Tenant header may pick one of Tenants instead.
	Tenant  string   `toml:"tenant" json:"tenant"`
	Tenants []string `toml:"tenants" json:"tenants,omitempty"`
	// Models maps a subject's last token to a model name (llm = "mlp":
	// inference.llm runs mlp); unmapped tokens name the model themselves.
	Models map[string]string `toml:"models" json:"models,omitempty"`
}

// Defaults of the [jobs] table and of [[jobs.streams]] entries.
const (
	JobsConcurrencyDefault      = 64
	JobsRequestTimeoutMsDefault = 10_000
	JobsPublishTimeoutMsDefault = 5_000
	JobsNakDelayMsDefault       = 500
	JobsBusyRetriesDefault      = 3
	JobsFetchWaitMsDefault      = 500

	JobStorageDefault           = "file"
	JobDuplicateWindowMsDefault = 120_000 // JetStream's own default, 2 min
	JobConsumerDefault          = "sluice"
	JobMaxAckPendingDefault     = 256
	JobAckWaitMsDefault         = 30_000
	JobMaxDeliverDefault        = 5
	JobFetchMaxDefault          = 32
	JobResultsDefault           = "inference.results.{model}"
	JobDeadLettersDefault       = "inference.dlq.{model}"
)

// Limits of the [jobs] table.
const (
	JobStreamsMax          = 16
	JobSubjectsMax         = 16
	JobTenantsMax          = 64
	JobModelsMax           = 64
	JobConcurrencyMax      = 4096
	JobTimeoutMsMax        = 600_000
	JobBusyRetriesMax      = 16
	JobFetchWaitMsMin      = 10
	JobFetchWaitMsMax      = 60_000
	JobMaxAckPendingMax    = 65_536
	JobAckWaitMsMin        = 1_000
	JobAckWaitMsMax        = 3_600_000
	JobMaxDeliverMax       = 1_000
	JobFetchMaxMax         = 256
	JobDuplicateWindowMsMn = 1_000
	JobDuplicateWindowMsMx = 7 * 24 * 3_600_000
	JobNameLenMax          = 64  // stream and consumer names
	JobSubjectLenMax       = 255 // a subject, templates rendered
	JobReplyPrefixesMax    = 16  // per tenant
)

func jobsDefaults() Jobs {
	return Jobs{
		Concurrency: JobsConcurrencyDefault, RequestTimeoutMs: JobsRequestTimeoutMsDefault,
		PublishTimeoutMs: JobsPublishTimeoutMsDefault, NakDelayMs: JobsNakDelayMsDefault,
		BusyRetries: JobsBusyRetriesDefault, FetchWaitMs: JobsFetchWaitMsDefault,
	}
}

// jobStreamDefaults fills keys left out of [[jobs.streams]] entries.
func (c *Config) jobStreamDefaults(has func(string) bool) {
	for i := range c.Jobs.Streams {
		s := &c.Jobs.Streams[i]
		k := fmt.Sprintf("jobs.streams[%d].", i)
		set := func(key string, p *int, v int) {
			if !has(k + key) {
				*p = v
			}
		}
		set("duplicate_window_ms", &s.DuplicateWindowMs, JobDuplicateWindowMsDefault)
		set("max_ack_pending", &s.MaxAckPending, JobMaxAckPendingDefault)
		set("ack_wait_ms", &s.AckWaitMs, JobAckWaitMsDefault)
		set("max_deliver", &s.MaxDeliver, JobMaxDeliverDefault)
		set("fetch_max", &s.FetchMax, JobFetchMaxDefault)
		set("replicas", &s.Replicas, 1)
		set("inflight_max", &s.InflightMax, s.MaxAckPending)
		if !has(k + "create") {
			s.Create = true
		}
		str := func(key string, p *string, v string) {
			if !has(k + key) {
				*p = v
			}
		}
		str("storage", &s.Storage, JobStorageDefault)
		str("consumer", &s.Consumer, JobConsumerDefault)
		str("results", &s.Results, JobResultsDefault)
		str("dead_letters", &s.DeadLetters, JobDeadLettersDefault)
		if !has(k+"filter_subjects") && s.FilterSubjects == nil {
			s.FilterSubjects = append([]string(nil), s.Subjects...)
		}
	}
}

func (c *checker) jobs(j *Jobs, f *Fleet, e *Engine) {
	if len(j.Streams) == 0 {
		return
	}
	c.count("jobs.streams", len(j.Streams), JobStreamsMax)
	if len(f.Servers) == 0 {
		c.add("jobs.streams[0]", "needs fleet.servers: the ingress connects to that NATS cluster")
	}
	c.rangeInt("jobs.concurrency", j.Concurrency, 1, JobConcurrencyMax)
	c.rangeInt("jobs.request_timeout_ms", j.RequestTimeoutMs, 1, JobTimeoutMsMax)
	c.rangeInt("jobs.publish_timeout_ms", j.PublishTimeoutMs, 1, JobTimeoutMsMax)
	c.rangeInt("jobs.nak_delay_ms", j.NakDelayMs, 0, JobTimeoutMsMax)
	c.rangeInt("jobs.busy_retries", j.BusyRetries, 0, JobBusyRetriesMax)
	c.rangeInt("jobs.fetch_wait_ms", j.FetchWaitMs, JobFetchWaitMsMin, JobFetchWaitMsMax)
	if j.DataAddress != "" {
		if _, err := netip.ParseAddrPort(j.DataAddress); err != nil {
			c.add("jobs.data_address", "%q is not an IP:port address", j.DataAddress)
		}
	} else if e.Transport != "io_uring" {
		c.add("jobs.data_address", "is required with engine.transport %q: the ingress sends UDP frames", e.Transport)
	}
	// A message may be held for its request, a result publish and a
	// dead-letter publish; the ack wait must cover them or JetStream hands
	// it to another appliance while it still runs here.
	held := j.RequestTimeoutMs + 2*j.PublishTimeoutMs
	for i := range j.Streams {
		c.jobStream(fmt.Sprintf("jobs.streams[%d]", i), &j.Streams[i], held)
		for _, o := range j.Streams[:i] {
			if o.Stream == j.Streams[i].Stream && o.Consumer == j.Streams[i].Consumer {
				c.add(fmt.Sprintf("jobs.streams[%d].consumer", i), "stream %q consumer %q listed twice", o.Stream, o.Consumer)
			}
		}
	}
}

func (c *checker) jobStream(key string, s *JobStream, heldMs int) {
	c.jobName(key+".stream", s.Stream)
	c.jobName(key+".consumer", s.Consumer)
	if s.Create && len(s.Subjects) == 0 {
		c.add(key+".subjects", "is required when create = true (the stream is made with them)")
	}
	c.count(key+".subjects", len(s.Subjects), JobSubjectsMax)
	for i, sub := range s.Subjects {
		if err := CheckSubject(sub, true); err != nil {
			c.add(fmt.Sprintf("%s.subjects[%d]", key, i), "%v", err)
		}
	}
	if len(s.FilterSubjects) == 0 {
		c.add(key+".filter_subjects", "is required when the entry names no subjects")
	}
	c.count(key+".filter_subjects", len(s.FilterSubjects), JobSubjectsMax)
	for i, sub := range s.FilterSubjects {
		if err := CheckSubject(sub, true); err != nil {
			c.add(fmt.Sprintf("%s.filter_subjects[%d]", key, i), "%v", err)
		}
	}
	c.oneOf(key+".storage", s.Storage, "file", "memory")
	c.rangeInt(key+".replicas", s.Replicas, 1, FleetReplicasMax)
	c.rangeInt(key+".duplicate_window_ms", s.DuplicateWindowMs, JobDuplicateWindowMsMn, JobDuplicateWindowMsMx)
	c.rangeInt(key+".max_ack_pending", s.MaxAckPending, 1, JobMaxAckPendingMax)
	c.rangeInt(key+".ack_wait_ms", s.AckWaitMs, JobAckWaitMsMin, JobAckWaitMsMax)
	if s.AckWaitMs <= heldMs {
		c.add(key+".ack_wait_ms", "%d must exceed jobs.request_timeout_ms + 2 × jobs.publish_timeout_ms (%d): a message is held that long at most", s.AckWaitMs, heldMs)
	}
	if s.MaxDeliver != -1 && (s.MaxDeliver < 1 || s.MaxDeliver > JobMaxDeliverMax) {
		c.add(key+".max_deliver", "%d is neither -1 (no bound) nor in 1..=%d", s.MaxDeliver, JobMaxDeliverMax)
	}
	c.replyPrefixes(key, s)
	c.rangeInt(key+".fetch_max", s.FetchMax, 1, JobFetchMaxMax)
	c.rangeInt(key+".inflight_max", s.InflightMax, 1, max(s.MaxAckPending, 1))
	for _, t := range []struct{ key, tmpl string }{{".results", s.Results}, {".dead_letters", s.DeadLetters}} {
		if err := CheckSubjectTemplate(t.tmpl); err != nil {
			c.add(key+t.key, "%v", err)
			continue
		}
		// The ingress must never take its own output for a request.
		probe := RenderSubject(t.tmpl, "model", s.Stream)
		for _, f := range s.FilterSubjects {
			if SubjectMatches(f, probe) {
				c.add(key+t.key, "%q falls under filter subject %q: the consumer would take its own output as requests (narrow filter_subjects, e.g. \"inference.*\")", t.tmpl, f)
			}
		}
	}
	if s.Tenant == "" {
		c.add(key+".tenant", "is required: requests run as that [[tenants]] entry, signed with its key")
	} else {
		c.token(key+".tenant", s.Tenant, lim.NameLenMax)
	}
	c.count(key+".tenants", len(s.Tenants), JobTenantsMax)
	for i, t := range s.Tenants {
		c.token(fmt.Sprintf("%s.tenants[%d]", key, i), t, lim.NameLenMax)
	}
	c.count(key+".models", len(s.Models), JobModelsMax)
	for tok, m := range s.Models {
		if err := CheckSubject(tok, false); err != nil || strings.Contains(tok, ".") {
			c.add(key+".models."+tok, "%q is not one subject token", tok)
		}
		c.token(key+".models."+tok, m, lim.ModelNameLenMax)
	}
}

// replyPrefixes checks reply_prefixes: tenants the stream takes, literal
// subjects outside the $-APIs and outside the requests' filter.
func (c *checker) replyPrefixes(key string, s *JobStream) {
	c.count(key+".reply_prefixes", len(s.ReplyPrefixes), JobTenantsMax+1)
	for tenant, list := range s.ReplyPrefixes {
		k := key + ".reply_prefixes." + tenant
		if tenant != s.Tenant && !slices.Contains(s.Tenants, tenant) {
			c.add(k, "tenant %q is neither the stream's tenant nor one of its tenants", tenant)
		}
		c.count(k, len(list), JobReplyPrefixesMax)
		for i, p := range list {
			pk := fmt.Sprintf("%s[%d]", k, i)
			if err := CheckReplySubject(p); err != nil {
				c.add(pk, "%v (a prefix is literal tokens: \"replies.demo\" allows replies.demo and replies.demo.anything)", err)
				continue
			}
			for _, f := range s.FilterSubjects {
				if SubjectMatches(f, p) || SubjectMatches(f, p+".reply") {
					c.add(pk, "%q falls under filter subject %q: replies would be taken for requests", p, f)
				}
			}
		}
	}
}

// CheckReplySubject checks a subject results may be published to on a
// request's word: no wildcards, nothing under $ (JetStream's $JS, the
// KV store's $KV, the system account's $SYS: publishing there with the
// fleet's credentials would change streams or fleet state).
func CheckReplySubject(s string) error {
	if err := CheckSubject(s, false); err != nil {
		return err
	}
	if strings.HasPrefix(s, "$") {
		return fmt.Errorf("subject %q: $-subjects are NATS APIs ($JS, $KV, $SYS), never a reply subject", s)
	}
	return nil
}

// SubjectUnder reports whether subject is prefix or a subject under it,
// token by token ("a.b" is under "a", "ab" is not).
func SubjectUnder(prefix, subject string) bool {
	return subject == prefix || (strings.HasPrefix(subject, prefix) && subject[len(prefix)] == '.')
}

// jobName checks a stream or consumer name as JetStream takes it.
func (c *checker) jobName(key, v string) {
	c.token(key, v, JobNameLenMax)
	if strings.ContainsAny(v, ".*>/\\") {
		c.add(key, "%q must not hold . * > / or \\", v)
	}
}

// CheckSubject checks a NATS subject: dot-separated tokens of printable
// ASCII without spaces; with wildcards allowed, a token may be * and the
// last may be >.
func CheckSubject(s string, wildcards bool) error {
	if s == "" || len(s) > JobSubjectLenMax {
		return fmt.Errorf("subject %q must be 1 to %d bytes", s, JobSubjectLenMax)
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" {
			return fmt.Errorf("subject %q has an empty token", s)
		}
		for j := 0; j < len(t); j++ {
			if t[j] <= ' ' || t[j] >= 0x7f {
				return fmt.Errorf("subject %q holds a space or a byte outside printable ASCII", s)
			}
		}
		wild := t == "*" || t == ">"
		if !wild && strings.ContainsAny(t, "*>") {
			return fmt.Errorf("subject %q: * and > must be whole tokens", s)
		}
		if wild && !wildcards {
			return fmt.Errorf("subject %q: wildcards are not allowed here", s)
		}
		if t == ">" && i != len(toks)-1 {
			return fmt.Errorf("subject %q: > must be the last token", s)
		}
	}
	return nil
}

// CheckSubjectTemplate checks a results or dead-letter template: a subject
// without wildcards once {model} and {stream} are filled in.
func CheckSubjectTemplate(t string) error {
	rest := strings.NewReplacer("{model}", "", "{stream}", "").Replace(t)
	if strings.ContainsAny(rest, "{}") {
		return fmt.Errorf("template %q: only {model} and {stream} may be filled in", t)
	}
	if err := CheckSubject(RenderSubject(t, "model", "stream"), false); err != nil {
		return fmt.Errorf("template %q: %w", t, err)
	}
	return nil
}

// RenderSubject fills a results or dead-letter template.
func RenderSubject(t, model, stream string) string {
	return strings.NewReplacer("{model}", model, "{stream}", stream).Replace(t)
}

// SubjectMatches reports whether subject falls under filter (NATS rules:
// * is one token, a last > is one or more).
func SubjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, t := range f {
		if t == ">" {
			return len(s) > i
		}
		if i >= len(s) || (t != "*" && t != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}
