package daemon

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// BodySizeMax bounds an admin request body, in bytes.
const BodySizeMax = 1 << 20

// Version is the daemon's version, reported by /v1/status.
const Version = "0.1.0"

type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func httpStatus(err error) int {
	switch errs.StatusOf(err) {
	case errs.StatusInvalidArgument:
		return http.StatusBadRequest
	case errs.StatusInvalidConfig:
		return http.StatusUnprocessableEntity
	case errs.StatusNotFound:
		return http.StatusNotFound
	case errs.StatusAlreadyExists:
		return http.StatusConflict
	case errs.StatusBusy, errs.StatusShuttingDown, errs.StatusNotRunning:
		return http.StatusServiceUnavailable
	case errs.StatusUnsupported:
		return http.StatusNotImplemented
	case errs.StatusTimeout:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed","code":"internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, err error) {
	code := httpStatus(err)
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, apiError{Error: err.Error(), Code: errs.Name(err)})
}

// decode reads a bounded JSON body into v, refusing unknown fields.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, BodySizeMax))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, apiError{
				Error: fmt.Sprintf("request body is over %d bytes", BodySizeMax), Code: "too_large"})
			return false
		}
		writeErr(w, fmt.Errorf("%w: reading body: %v", errs.ErrInvalidArgument, err))
		return false
	}
	if err := decodeBytes(body, v); err != nil {
		writeErr(w, err)
		return false
	}
	return true
}

func decodeBytes(body []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: bad JSON: %v", errs.ErrInvalidArgument, err)
	}
	if d.More() {
		return fmt.Errorf("%w: bad JSON: trailing data", errs.ErrInvalidArgument)
	}
	return nil
}

// requireToken wraps h with bearer-token auth when token is set. A wrong or
// missing token gets a bare 401.
func requireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	// Digests have a fixed length, so the comparison leaks nothing, not even
	// the token's length.
	want := sha256.Sum256([]byte("Bearer " + token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
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

func (d *Daemon) routes() *http.ServeMux {
	mux := http.NewServeMux()
	s := d.state
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.eng.Status()
		if err != nil {
			writeErr(w, err)
			return
		}
		s.mu.Lock()
		doc := StatusDoc{Engine: st, Daemon: DaemonStatus{
			Version: Version, Config: s.path, Engine: d.engineName, Store: s.eff.Control.Store,
			UptimeS: int64(time.Since(s.started) / time.Second), ReloadsOK: s.reloadsOK, ReloadsFailed: s.reloadsKO,
		}}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, doc)
	})
	mux.HandleFunc("GET /v1/workers", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.eng.Status()
		if err != nil {
			writeErr(w, err)
			return
		}
		stats, err := d.eng.Stats()
		if err != nil {
			writeErr(w, err)
			return
		}
		out := make([]WorkerDoc, 0, len(st.Workers))
		for _, wi := range st.Workers {
			doc := WorkerDoc{WorkerInfo: wi}
			for i := range stats.Workers {
				if stats.Workers[i].Index == wi.Index {
					doc.Stats = &stats.Workers[i]
				}
			}
			out = append(out, doc)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/shards", func(w http.ResponseWriter, r *http.Request) {
		stats, err := d.eng.Stats()
		if err != nil {
			writeErr(w, err)
			return
		}
		cfg := s.snapshot()
		out := make([]ShardDoc, 0, len(cfg.Shards))
		for _, sh := range cfg.Shards {
			doc := ShardDoc{Name: sh.Name, Labels: sh.Labels, MaxConcurrency: sh.MaxConcurrency, QueueDepth: sh.QueueDepth,
				Workers: sh.Workers, Local: carries(cfg.Host.Labels, sh.Labels)}
			for i := range stats.Shards {
				if stats.Shards[i].Name == sh.Name {
					doc.Stats = &stats.Shards[i]
				}
			}
			out = append(out, doc)
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		doc := RoutesDoc{Source: "file", Routes: nonNil(s.eff.Clone().Routes)}
		if _, err := s.st.Get(keyRoutes); err == nil {
			doc.Source = "api"
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, doc)
	})
	mux.HandleFunc("PUT /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		var raw json.RawMessage
		if !decode(w, r, &raw) {
			return
		}
		var routes []config.Route
		if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
			if err := decodeBytes(t, &routes); err != nil {
				writeErr(w, err)
				return
			}
		} else {
			var doc RoutesDoc
			if err := decodeBytes(t, &doc); err != nil {
				writeErr(w, err)
				return
			}
			routes = doc.Routes
		}
		if err := s.setRoutes(routes); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, RoutesDoc{Source: "api", Routes: nonNil(routes)})
	})
	mux.HandleFunc("DELETE /v1/routes", func(w http.ResponseWriter, r *http.Request) {
		if err := s.resetRoutes(); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		cfg := s.snapshot()
		out := make([]TenantView, 0, len(cfg.Tenants))
		for _, t := range cfg.Tenants {
			out = append(out, TenantView{Name: t.Name, ID: t.ID, Models: nonNil(t.Models), Adapters: nonNil(t.Adapters)})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("PUT /v1/tenants", func(w http.ResponseWriter, r *http.Request) {
		var ts []config.Tenant
		if !decode(w, r, &ts) {
			return
		}
		if err := s.setTenants(ts); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		ms, err := d.eng.Models()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nonNil(ms))
	})
	mux.HandleFunc("GET /v1/models/{name}", d.modelMeta)
	mux.HandleFunc("POST /v1/models", func(w http.ResponseWriter, r *http.Request) {
		var m config.Model
		if !decode(w, r, &m) {
			return
		}
		if err := s.loadModel(m); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, m)
	})
	mux.HandleFunc("PUT /v1/models/{name}/aliases/{alias}", func(w http.ResponseWriter, r *http.Request) {
		var b AliasBody
		if !decode(w, r, &b) {
			return
		}
		if b.Version == "" {
			writeErr(w, fmt.Errorf("%w: version is required", errs.ErrInvalidArgument))
			return
		}
		if err := s.setAlias(r.PathValue("name"), r.PathValue("alias"), b.Version); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"model": r.PathValue("name"), "alias": r.PathValue("alias"), "version": b.Version})
	})
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		ps, err := d.eng.Peers()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nonNil(ps))
	})
	mux.HandleFunc("POST /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		var p config.Peer
		if !decode(w, r, &p) {
			return
		}
		if err := s.addPeer(p); err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, p)
	})
	mux.HandleFunc("DELETE /v1/peers/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := s.removePeer(r.PathValue("name")); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/connections", func(w http.ResponseWriter, r *http.Request) {
		cs, err := d.eng.Connections()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, nonNil(cs))
	})
	mux.HandleFunc("DELETE /v1/connections/{id}", func(w http.ResponseWriter, r *http.Request) {
		raw := r.PathValue("id")
		id, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			writeErr(w, fmt.Errorf("%w: connection id %q is not a decimal id from GET /v1/connections", errs.ErrInvalidArgument, raw))
			return
		}
		if err := d.eng.CloseConnection(id); err != nil {
			writeErr(w, err)
			return
		}
		// The disconnect is under way; the connection may be listed as
		// "closing" until its worker has let go of it.
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := d.eng.Stats()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("POST /v1/reload", func(w http.ResponseWriter, r *http.Request) {
		res, err := s.reload()
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	})
	mux.Handle("GET /metrics", d.metricsHandler())
	return mux
}

// carries reports whether host labels include every shard label.
func carries(host, shard map[string]string) bool {
	for k, v := range shard {
		if host[k] != v {
			return false
		}
	}
	return true
}
