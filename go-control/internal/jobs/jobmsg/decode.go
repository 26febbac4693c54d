// Package jobmsg is the message codec of the jobs ingress (docs/jobs.md):
// how a JetStream message (subject, headers, body) becomes a Sluice
// request, how the answer becomes a result body, and which failures are
// dead letters and which are retried. It holds no connection, so it is
// tested and fuzzed on its own.
package jobmsg

import (
	"bytes"
	"encoding/hex"
	"mime"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// Headers a request message may carry. They are matched without regard to
// case (NATS headers are case-sensitive; publishers are not all careful).
const (
	HeaderModelVersion  = "X-Model-Version"   // required (model_version_required otherwise)
	HeaderAdapter       = "X-Lora-Adapter-ID" // LoRA adapter id
	HeaderIntent        = "X-AI-Intent"       // routing intent ("reasoning", ...)
	HeaderTimeout       = "X-AI-Timeout"      // a Go duration ("8s", "250ms") from the message's stored time
	HeaderTraceparent   = "traceparent"       // W3C trace context; an invalid one is ignored, as W3C says
	HeaderTenant        = "X-Tenant"          // a tenant name among the stream's tenants
	HeaderReplyTo       = "X-Reply-To"        // where the result goes instead of the results template
	HeaderSchemaID      = "X-Schema-Id"       // structured-section bodies: the registry id
	HeaderSchemaVersion = "X-Schema-Version"  // and version (0 or none: the newest live one)
	HeaderContentType   = "Content-Type"
)

// Content types of request bodies; a result uses its request's Family.
const (
	ContentFrame   = "application/x-sluice-frame"   // a Sluice request frame (docs/wire.md); also told by the magic "SLCE"
	ContentJSON    = "application/json"             // a KServe v2 inference request; also told by a leading '{'
	ContentSection = "application/x-sluice-section" // a structured section's bytes, checked against X-Schema-Id
)

// Limits of a request message.
const (
	TimeoutMax = 24 * time.Hour
	BodyLenMax = 8 << 20 // bytes; NATS's own max_payload (1 MiB by default) is usually lower
)

// Family is how a body encodes its tensors; a result uses its request's.
type Family uint8

// Body families.
const (
	FamilyFrame Family = iota + 1
	FamilyJSON
	FamilySection
	// FamilyOpenAI is an OpenAI completions or chat request for a model
	// served by backends: it goes to the appliance's OpenAI front door as
	// it came, and its result is the completion JSON (openai.go).
	FamilyOpenAI
)

// ContentType is the Content-Type of a result of the family.
func (f Family) ContentType() string {
	switch f {
	case FamilyFrame:
		return ContentFrame
	default:
		return ContentJSON
	}
}

// Job is one message read as a request.
type Job struct {
	Family  Family
	Req     sluice.Request
	Tenant  config.Tenant // signs Req
	Model   string        // for the subject templates
	Timeout time.Duration // X-AI-Timeout; 0: none
	ReplyTo string
	// Echoed in the result: the frame's own request id, the KServe body's
	// "id" and the outputs it asked for.
	FrameRequestID uint64
	KServeID       string
	Outputs        []string
	// A FamilyOpenAI job: the body as published, and the front door's
	// path it goes to (/v1/completions or /v1/chat/completions).
	Body []byte
	Path string
}

// BackendFunc tells whether a model, at the version a message names (""
// when it names none), is served by backends ([[backends]], kind =
// "backend"): its jobs go to the OpenAI front door.
type BackendFunc func(model, version string) bool

// getenv reads tenant keys written "env:VAR".
var getenv = os.Getenv

// TenantFunc finds a tenant by name, or by id when name is "".
type TenantFunc func(name string, id int64) (config.Tenant, bool)

// header returns a header's first value, matching its name without case.
func header(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && strings.EqualFold(k, name) {
			return vs[0]
		}
	}
	return ""
}

// bodyFamily tells how the body is encoded: by Content-Type, else by its
// first bytes.
func bodyFamily(h nats.Header, body []byte) (Family, *Failure) {
	if ct := header(h, HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			return 0, DeadLetter(CodeBadMessage, "Content-Type %q: %v", ct, err)
		case mt == ContentFrame:
			return FamilyFrame, nil
		case mt == ContentJSON:
			return FamilyJSON, nil
		case mt == ContentSection:
			return FamilySection, nil
		}
		return 0, DeadLetter(CodeBadMessage, "Content-Type %q is not one of %s, %s, %s", ct, ContentFrame, ContentJSON, ContentSection)
	}
	if bytes.HasPrefix(body, []byte(wire.Magic)) {
		return FamilyFrame, nil
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return FamilyJSON, nil
	}
	return 0, DeadLetter(CodeBadMessage, "no Content-Type, and the body is neither a Sluice frame (magic SLCE) nor a JSON object")
}

// Decode reads a message of stream s as a request. backend (nil: none)
// tells the models served by backends: a message for one, other than a
// frame, is an OpenAI request (FamilyOpenAI).
func Decode(s *config.JobStream, subject string, h nats.Header, body []byte, tenants TenantFunc, backend BackendFunc) (*Job, *Failure) {
	if len(body) > BodyLenMax {
		return nil, DeadLetter(wire.CodeFrameTooLarge.String(), "body of %d bytes; at most %d", len(body), BodyLenMax)
	}
	fam, f := bodyFamily(h, body)
	if f != nil {
		return nil, f
	}
	j := &Job{Family: fam, ReplyTo: header(h, HeaderReplyTo)}
	if j.ReplyTo != "" {
		if err := config.CheckReplySubject(j.ReplyTo); err != nil {
			return nil, DeadLetter(CodeReplyToRefused, "%s: %v", HeaderReplyTo, err)
		}
	}
	if t := header(h, HeaderTimeout); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 || d > TimeoutMax {
			return nil, DeadLetter(CodeBadMessage, "%s %q is not a duration in (0, %v] such as 8s or 250ms", HeaderTimeout, t, TimeoutMax)
		}
		j.Timeout = d
	}
	if fam == FamilyFrame {
		if f := decodeFrame(s, j, body, tenants); f != nil {
			return nil, f
		}
		if f := checkReplyTo(s, j); f != nil {
			return nil, f
		}
		return j, nil
	}
	if backend != nil && backend(ModelOf(s, subject), strings.TrimSpace(header(h, HeaderModelVersion))) {
		if f := decodeHeaders(s, j, subject, h, tenants, false); f != nil {
			return nil, f
		}
		if f := checkReplyTo(s, j); f != nil {
			return nil, f
		}
		if f := decodeOpenAI(j, body); f != nil {
			return nil, f
		}
		return j, nil
	}
	if f := decodeHeaders(s, j, subject, h, tenants, true); f != nil {
		return nil, f
	}
	if f := checkReplyTo(s, j); f != nil {
		return nil, f
	}
	switch fam {
	case FamilyJSON:
		in, err := parseKServe(body)
		if err != nil {
			return nil, err
		}
		j.Req.Inputs, j.KServeID, j.Outputs = in.inputs, in.id, in.outputs
	case FamilySection:
		id, err := strconv.ParseUint(header(h, HeaderSchemaID), 10, 32)
		if err != nil || id == 0 {
			return nil, DeadLetter(CodeBadMessage, "a %s body needs %s, a schema registry id (1..=%d)", ContentSection, HeaderSchemaID, uint32(1<<32-1))
		}
		var ver uint64
		if v := header(h, HeaderSchemaVersion); v != "" {
			if ver, err = strconv.ParseUint(v, 10, 32); err != nil {
				return nil, DeadLetter(CodeBadMessage, "%s %q is not a version number", HeaderSchemaVersion, v)
			}
		}
		j.Req.Section, j.Req.SchemaID, j.Req.SchemaVersion = body, uint32(id), uint32(ver)
	}
	return j, nil
}

// checkReplyTo allows j's reply subject only under its tenant's
// reply_prefixes: the result is published with the fleet's credentials,
// so a request must not pick where it lands. Checked before the request
// runs, so a refused one costs no inference.
func checkReplyTo(s *config.JobStream, j *Job) *Failure {
	if j.ReplyTo == "" {
		return nil
	}
	prefixes := s.ReplyPrefixes[j.Tenant.Name]
	for _, p := range prefixes {
		if config.SubjectUnder(p, j.ReplyTo) {
			return nil
		}
	}
	if len(prefixes) == 0 {
		return DeadLetter(CodeReplyToRefused, "%s %q: tenant %q may not redirect results on stream %s (no jobs.streams reply_prefixes for it)",
			HeaderReplyTo, j.ReplyTo, j.Tenant.Name, s.Stream)
	}
	return DeadLetter(CodeReplyToRefused, "%s %q is under none of tenant %q's reply_prefixes %q on stream %s",
		HeaderReplyTo, j.ReplyTo, j.Tenant.Name, prefixes, s.Stream)
}

// decodeHeaders maps the subject and headers onto the request (JSON,
// section and OpenAI bodies): the model from the subject, the rest from
// headers. versionRequired: X-Model-Version must be there (the OpenAI
// front door has defaults of its own, [openai].default_versions).
func decodeHeaders(s *config.JobStream, j *Job, subject string, h nats.Header, tenants TenantFunc, versionRequired bool) *Failure {
	model := ModelOf(s, subject)
	if len(model) > wire.ModelNameLenMax {
		return DeadLetter(CodeBadMessage, "model %q (from subject %s) is longer than %d bytes", model, subject, wire.ModelNameLenMax)
	}
	j.Model = model
	j.Req.Model = model
	j.Req.Version = header(h, HeaderModelVersion)
	if j.Req.Version == "" && versionRequired {
		return DeadLetter(wire.CodeModelVersionRequired.String(), "the message has no %s header", HeaderModelVersion)
	}
	j.Req.Adapter = header(h, HeaderAdapter)
	j.Req.Intent = header(h, HeaderIntent)
	for _, f := range []struct{ name, v string }{{HeaderModelVersion, j.Req.Version}, {HeaderAdapter, j.Req.Adapter}, {HeaderIntent, j.Req.Intent}} {
		if f.v != "" && !isToken(f.v) {
			return DeadLetter(CodeBadMessage, "%s %q is not printable ASCII without spaces", f.name, f.v)
		}
	}
	j.Req.Trace, _ = ParseTraceparent(header(h, HeaderTraceparent))
	name := header(h, HeaderTenant)
	if name == "" {
		name = s.Tenant
	} else if name != s.Tenant && !slices.Contains(s.Tenants, name) {
		return DeadLetter(wire.CodeForbidden.String(), "stream %s does not take requests for tenant %q (jobs.streams tenant and tenants)", s.Stream, name)
	}
	t, ok := tenants(name, 0)
	if !ok {
		// A config that names a tenant the appliance lacks (yet): it may
		// arrive through the API or the fleet.
		return Retryable(wire.CodeUnauthenticated.String(), "tenant %q is not configured on this appliance", name)
	}
	j.Tenant = t
	return nil
}

// decodeFrame takes a Sluice request frame as the whole request. It must
// be signed by its tenant, which the stream must accept; the ingress
// checks the tag, then sends the frame's content under a request id of
// its own (so re-signs it with the same tenant's key).
func decodeFrame(s *config.JobStream, j *Job, body []byte, tenants TenantFunc) *Failure {
	f, err := wire.Parse(body)
	if err != nil {
		code := wire.CodeMalformedFrame
		if we, ok := err.(wire.Error); ok {
			code = we.Code()
		}
		return DeadLetter(code.String(), "the body is not a valid Sluice frame: %v", err)
	}
	if f.Kind() != wire.KindRequest {
		return DeadLetter(wire.CodeUnsupportedKind.String(), "a %s body must be a request frame, not %s", ContentFrame, f.Kind())
	}
	if f.Flags()&wire.FlagAuthenticated == 0 {
		return DeadLetter(wire.CodeUnauthenticated.String(), "a frame body must be signed by its tenant (docs/wire.md, Authentication)")
	}
	t, ok := tenants("", int64(f.TenantID()))
	if !ok {
		return DeadLetter(wire.CodeUnauthenticated.String(), "tenant id %d is not configured", f.TenantID())
	}
	if t.Name != s.Tenant && !slices.Contains(s.Tenants, t.Name) {
		return DeadLetter(wire.CodeForbidden.String(), "stream %s does not take requests for tenant %q", s.Stream, t.Name)
	}
	key, kerr := config.DecodeKey(t.Key, getenv)
	if kerr != nil || !wire.NewTenantKey(key).Verify(&f) {
		return DeadLetter(wire.CodeUnauthenticated.String(), "the frame's tag does not verify with tenant %q's key", t.Name)
	}
	j.Tenant = t
	j.FrameRequestID = f.RequestID()
	j.Model = f.Model()
	r := &j.Req
	r.Model, r.Version, r.Adapter, r.Intent = f.Model(), f.ModelVersion(), f.Adapter(), f.Intent()
	r.SchemaID, r.SchemaVersion, r.TokenCount, r.Trace = f.SchemaID(), f.SchemaVersion(), f.TokenCount(), f.Trace()
	if us := f.DeadlineUs(); us != 0 {
		r.Deadline = time.UnixMicro(int64(min(us, 1<<62)))
	}
	for i := range f.NumExtensions() {
		k, v := f.Extension(i)
		r.Extensions = append(r.Extensions, wire.Extension{Key: k, Value: v})
	}
	// Views into the message body, which outlives the request; the one
	// copy is into the datagram. The section rides along as its tensor.
	for i := range f.NumTensors() {
		d := f.Tensor(i)
		r.Inputs = append(r.Inputs, sluice.Tensor{Name: d.Name(), DType: d.DType, Dims: d.Dims(), Data: f.TensorData(d)})
	}
	return nil
}

// ModelOf names the model a subject asks for: its last token, through the
// stream's models table.
func ModelOf(s *config.JobStream, subject string) string {
	tok := subject[strings.LastIndexByte(subject, '.')+1:]
	if m, ok := s.Models[tok]; ok {
		return m
	}
	return tok
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// ParseTraceparent reads a W3C traceparent, version 00 (or a later
// version's first four fields, as W3C allows).
func ParseTraceparent(v string) (wire.TraceContext, bool) {
	var t wire.TraceContext
	p := strings.Split(strings.TrimSpace(v), "-")
	if len(p) < 4 || len(p[0]) != 2 || p[0] == "ff" || (p[0] == "00" && len(p) != 4) ||
		len(p[1]) != 32 || len(p[2]) != 16 || len(p[3]) != 2 {
		return t, false
	}
	for _, s := range p[:4] {
		if strings.ToLower(s) != s {
			return t, false
		}
	}
	var fl [1]byte
	if _, err := hex.Decode(t.TraceID[:], []byte(p[1])); err != nil {
		return wire.TraceContext{}, false
	}
	if _, err := hex.Decode(t.SpanID[:], []byte(p[2])); err != nil {
		return wire.TraceContext{}, false
	}
	if _, err := hex.Decode(fl[:], []byte(p[3])); err != nil {
		return wire.TraceContext{}, false
	}
	if t.TraceID == [16]byte{} || t.SpanID == [8]byte{} {
		return wire.TraceContext{}, false
	}
	t.Flags = fl[0]
	return t, true
}

// FormatTraceparent writes a trace context as a traceparent header.
func FormatTraceparent(t wire.TraceContext) string {
	if !t.IsSet() {
		return ""
	}
	return "00-" + hex.EncodeToString(t.TraceID[:]) + "-" + hex.EncodeToString(t.SpanID[:]) + "-" + hex.EncodeToString([]byte{t.Flags})
}
