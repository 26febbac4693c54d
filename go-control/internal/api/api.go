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
}

func (e *Error) Error() string { return e.Message + " (" + e.Code + ")" }

// Causes shared by both APIs, with their statuses.
const (
	CodeNotFound         = "not_found"          // 404: no such path
	CodeMethodNotAllowed = "method_not_allowed" // 405, with Allow
	CodeTooLarge         = "too_large"          // 413: body over the limit
	CodeUnauthorized     = "unauthorized"       // 401: admin token missing or wrong
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
	Local          bool               `json:"local"` // the host carries its labels
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

// ReloadResult says what a reload changed.
type ReloadResult struct {
	Applied []string `json:"applied"` // live sections sent to the engine
	// RestartRequired lists changed sections that only a restart takes;
	// their running values stay.
	RestartRequired []string `json:"restart_required"`
}
