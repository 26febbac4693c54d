// Package api holds the documents of sluiced's admin API (/v1/...) as they
// cross the wire, and the one error body the admin API and the schema
// registry share. sluicectl and the daemon both use it, so the CLI needs
// nothing of the daemon. openapi.json beside it is the reference; its test
// checks that the daemon serves exactly the paths it lists.
package api

import (
	_ "embed"
	"encoding/json"
	"net/http"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// OpenAPI is the OpenAPI 3 document of the admin API and the registry,
// served at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

// Error is the body of every error answer, on the admin API and on the
// registry alike. ErrorCode and Message are the Confluent Schema Registry's
// keys (its clients read them): on the registry ErrorCode is Confluent's code
// (40401, 42201, ...), on the admin API it is the HTTP status. Code names
// the cause in snake_case ("not_found", "invalid_config", "too_large").
type Error struct {
	ErrorCode int    `json:"error_code"`
	Message   string `json:"message"`
	Code      string `json:"code"`
	// Messages lists what breaks, for the registry's incompatible_schema.
	Messages []string `json:"messages,omitempty"`
	// Differences are the registry's incompatible_schema differences the
	// messages were rendered from, each with the earlier version it was
	// checked against.
	Differences []SchemaDifference `json:"differences,omitempty"`
	// Change names a fleet write whose outcome is unknown (504).
	Change *Outcome `json:"change,omitempty"`
}

// Outcome names a fleet write whose outcome is unknown: it was sent to the
// store and not answered in time, so it may still be applied (then by
// every appliance) or never. Repeat the call with the same
// Idempotency-Key (within RepeatWithin it is not applied twice, and the
// answer says whether it had landed), or read the keys back: the change
// landed if a key moved past its base revision carrying the change id.
type Outcome struct {
	ID            string   `json:"id"`
	Bucket        string   `json:"bucket"`
	Keys          []string `json:"keys"`
	BaseRevisions []uint64 `json:"base_revisions"`
	RepeatWithin  string   `json:"repeat_within"`
}

func (e *Error) Error() string { return e.Message + " (" + e.Code + ")" }

// Causes shared by both APIs, with their statuses.
const (
	CodeNotFound         = "not_found"          // 404: no such path
	CodeMethodNotAllowed = "method_not_allowed" // 405, with Allow
	CodeTooLarge         = "too_large"          // 413: body over the limit
	CodeUnauthorized     = "unauthorized"       // 401: admin token missing or wrong
	CodeOutOfRange       = "out_of_range"       // 422: parameters each well formed, together outside a limit
	// Refusals of what a web page could make a browser send (the admin
	// API has no token on loopback): docs/api.md, "Browsers".
	CodeCrossOrigin          = "cross_origin"           // 403: a write from another site (Origin, Sec-Fetch-Site)
	CodeUnsupportedMediaType = "unsupported_media_type" // 415: a write body that is not JSON (or the route's own type)
	CodeMisdirectedHost      = "misdirected_host"       // 421: on loopback, a Host that is no local name (DNS rebinding)
)

// WriteError writes e as JSON with the given status and content type.
func WriteError(w http.ResponseWriter, status int, contentType string, e Error) {
	b, err := json.Marshal(e)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error_code":500,"message":"encoding the error failed","code":"internal"}`)
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// TenantView is a tenant as the API shows it: never with its key.
type TenantView struct {
	Name     string   `json:"name"`
	ID       int64    `json:"id"`
	Models   []string `json:"models"`
	Adapters []string `json:"adapters"`
	Routes   []string `json:"routes"`
	Subjects []string `json:"subjects"`
}

// RoutesDoc is what GET /v1/routes returns; PUT takes it or a bare array.
type RoutesDoc struct {
	Source string         `json:"source"` // "file" or "api"
	Routes []config.Route `json:"routes"`
}

// StatusDoc is what GET /v1/status returns.
type StatusDoc struct {
	Daemon DaemonStatus  `json:"daemon"`
	Engine engine.Status `json:"engine"`
}

// DaemonStatus describes sluiced itself.
type DaemonStatus struct {
	Version       string `json:"version"`
	Config        string `json:"config"`
	Engine        string `json:"engine"`
	Store         string `json:"store"`
	UptimeS       int64  `json:"uptime_s"`
	ReloadsOK     uint64 `json:"reloads_ok"`
	ReloadsFailed uint64 `json:"reloads_failed"`
}

// WorkerDoc joins a worker's info and counters.
type WorkerDoc struct {
	engine.WorkerInfo
	Stats *engine.WorkerStats `json:"stats,omitempty"`
}

// ShardDoc joins a shard's config and counters.
// (Fields are spelled out: embedding config.Shard would take its strict
// UnmarshalJSON along.)
type ShardDoc struct {
	Name           string             `json:"name"`
	Labels         map[string]string  `json:"labels,omitempty"`
	MaxConcurrency int                `json:"max_concurrency"`
	QueueDepth     int                `json:"queue_depth"`
	Workers        []int              `json:"workers,omitempty"`
	BatchMax       int                `json:"batch_max"`      // most rows per batched run (1: off)
	BatchDelayUs   int                `json:"batch_delay_us"` // a batch's longest wait, µs
	Local          bool               `json:"local"`          // the host carries its labels
	Stats          *engine.ShardStats `json:"stats,omitempty"`
}

// AliasBody is the body of PUT /v1/models/{name}/aliases/{alias}.
type AliasBody struct {
	Version string `json:"version"`
}

// AliasDoc is the answer to PUT /v1/models/{name}/aliases/{alias}.
type AliasDoc struct {
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	Version string `json:"version"`
}

// EndpointBody is the body of POST /v1/backends/{pool}/endpoints (add)
// and of its /drain and /undrain: the endpoint's URL, http(s)://host:port.
type EndpointBody struct {
	URL string `json:"url"`
}

// ReloadResult says what a reload changed.
type ReloadResult struct {
	Applied []string `json:"applied"` // live sections sent to the engine
	// RestartRequired lists changed sections that only a restart takes;
	// their running values stay.
	RestartRequired []string `json:"restart_required"`
}

// JobsDoc is what GET /v1/jobs returns: the JetStream ingress (docs/jobs.md).
type JobsDoc struct {
	Enabled   bool           `json:"enabled"`   // [[jobs.streams]] are configured
	Connected string         `json:"connected"` // the NATS server in use; "" while (re)connecting or off
	Draining  bool           `json:"draining"`  // stopped fetching; finishing what it holds
	Streams   []JobStreamDoc `json:"streams"`
}

// JobStreamDoc is one configured stream and its durable consumer.
type JobStreamDoc struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	// State is "starting" (finding or creating the stream and consumer),
	// "consuming", "draining" or "stopped".
	State     string `json:"state"`
	LastError string `json:"last_error,omitempty"`
	// From the consumer's info, fleet-wide (read every few seconds):
	// Lag is stored and not yet delivered; AckPending delivered and not
	// yet acked (bounded by MaxAckPending).
	Lag           uint64 `json:"lag"`
	AckPending    uint64 `json:"ack_pending"`
	MaxAckPending int    `json:"max_ack_pending"`
	// InFlight is held by this appliance now.
	InFlight int         `json:"in_flight"`
	Counters JobCounters `json:"counters"`
}

// JobCounters count what this appliance did with a stream's messages
// since it started. Every message taken ends acked (after its result or
// dead letter was stored, or skipped) or nak'ed.
type JobCounters struct {
	Received      uint64 `json:"received"`       // messages fetched
	Redelivered   uint64 `json:"redelivered"`    // of those, delivered before (to any appliance)
	Acked         uint64 `json:"acked"`          // acked: result or dead letter stored, or skipped
	Naked         uint64 `json:"naked"`          // nak'ed for a retryable error, with nak_delay_ms
	Results       uint64 `json:"results"`        // results stored
	Duplicates    uint64 `json:"duplicates"`     // result or dead-letter publishes JetStream found already stored (Nats-Msg-Id)
	DeadLettered  uint64 `json:"dead_lettered"`  // dead letters stored
	Expired       uint64 `json:"expired"`        // of those, past X-AI-Timeout and not run
	Skipped       uint64 `json:"skipped"`        // sluiced's own results or dead letters met on the consumer, acked unrun
	PublishErrors uint64 `json:"publish_errors"` // result or dead-letter publishes that failed (the message was nak'ed)
	FetchErrors   uint64 `json:"fetch_errors"`
	// DeadLetterCodes counts dead letters by code.
	DeadLetterCodes map[string]uint64 `json:"dead_letter_codes"`
}

// TransformPut answers PUT /v1/transforms/{subject}/{from}/{to}: the
// module is checked, compiled and every worker runs it from tables epoch
// Epoch on.
type TransformPut struct {
	Subject string `json:"subject"`
	From    int    `json:"from"`
	To      int    `json:"to"`
	Epoch   uint64 `json:"epoch"`
	Bytes   int    `json:"bytes"`
}

// SchemaDifference is one change between two versions of a registered
// schema, with its verdict in each direction (registry/compat.Difference).
type SchemaDifference struct {
	// Version is the earlier version the candidate was checked against
	// (in a 409 body and a compatibility answer).
	Version        int    `json:"version,omitempty"`
	Path           string `json:"path"`
	Rule           string `json:"rule"`
	Backward       string `json:"backward"` // compatible, breaking or warning
	Forward        string `json:"forward"`
	Message        string `json:"message"`
	ForwardRule    string `json:"forward_rule,omitempty"`
	ForwardMessage string `json:"forward_message,omitempty"`
	Category       string `json:"category,omitempty"` // buf category, Protobuf
}

// ContractField is one element of a version's contract.
type ContractField struct {
	Path       string `json:"path"`
	Name       string `json:"name,omitempty"`
	Type       string `json:"type"`
	Required   bool   `json:"required,omitempty"`
	Deprecated bool   `json:"deprecated,omitempty"`
}

// ContractDoc is what GET /registry/subjects/{s}/versions/{v}/contract
// returns: the snapshot stored with the version.
type ContractDoc struct {
	Subject         string          `json:"subject"`
	Version         int             `json:"version"`
	ID              int             `json:"id"`
	SchemaType      string          `json:"schemaType"`
	Canonical       string          `json:"canonical"`
	Fingerprint     string          `json:"fingerprint"`
	Fields          []ContractField `json:"fields"`
	FieldsTruncated bool            `json:"fields_truncated,omitempty"`
	Signature       json.RawMessage `json:"signature,omitempty"` // TENSOR only
}

// DiffDoc is what GET /registry/subjects/{s}/diff?from=&to= returns.
type DiffDoc struct {
	Subject    string `json:"subject"`
	From       int    `json:"from"`
	To         int    `json:"to"`
	SchemaType string `json:"schemaType"`
	// Compatibility is the subject's level; Compatible says whether to
	// could follow from under it (transitive levels checked against from
	// only).
	Compatibility string             `json:"compatibility"`
	Compatible    bool               `json:"compatible"`
	Differences   []SchemaDifference `json:"differences"`
}
