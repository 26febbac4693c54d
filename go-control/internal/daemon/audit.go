package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Outcomes of a control change, as logged and counted.
const (
	outcomeOK      = "ok"      // applied
	outcomeRefused = "refused" // the request was wrong (4xx): nothing changed
	outcomeFailed  = "failed"  // the daemon or engine failed (5xx)
)

// SchemaPushWaitMax bounds how long the audit line of a registry change
// waits for the new schema set to reach the engine, to log its epoch.
const SchemaPushWaitMax = 2 * time.Second

// auditLog counts control changes by kind and outcome for /metrics.
type auditLog struct {
	mu     sync.Mutex
	counts map[[2]string]uint64
}

type auditCount struct {
	kind, outcome string
	n             uint64
}

func (a *auditLog) add(kind, outcome string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.counts == nil {
		a.counts = map[[2]string]uint64{}
	}
	a.counts[[2]string{kind, outcome}]++
}

// snapshot lists the counts in a stable order.
func (a *auditLog) snapshot() []auditCount {
	a.mu.Lock()
	out := make([]auditCount, 0, len(a.counts))
	for k, n := range a.counts {
		out = append(out, auditCount{k[0], k[1], n})
	}
	a.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].kind != out[j].kind {
			return out[i].kind < out[j].kind
		}
		return out[i].outcome < out[j].outcome
	})
	return out
}

func outcomeOf(err error) string {
	if err == nil {
		return outcomeOK
	}
	var rf *registryFailure
	if errors.As(err, &rf) {
		if rf.status >= 500 {
			return outcomeFailed
		}
		return outcomeRefused
	}
	if errors.Is(err, errTooLarge) || httpStatus(err) < 500 {
		return outcomeRefused
	}
	return outcomeFailed
}

// audit logs and counts one control change made through the API.
func (d *Daemon) audit(r *http.Request, kind, action, what string, err error) {
	d.auditAs(who(r), kind, action, what, err)
	if r != nil {
		d.traceChange(r.Context(), who(r), kind, action, what, outcomeOf(err), err)
	}
}

// auditAs logs one control change: who made it, what it was, how it ended
// and the config epoch in force after it.
func (d *Daemon) auditAs(who, kind, action, what string, err error) {
	outcome := outcomeOf(err)
	d.audits.add(kind, outcome)
	attrs := []any{"who", who, "kind", kind, "action", action, "what", what, "outcome", outcome}
	if st, serr := d.eng.Status(); serr == nil {
		attrs = append(attrs, "epoch", st.Epoch)
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
		code := errs.Name(err)
		var rf *registryFailure
		if errors.As(err, &rf) {
			code = rf.body.Code
		}
		attrs = append(attrs, "err", err.Error(), "code", code)
	}
	d.state.log.Log(context.Background(), level, "audit", attrs...)
}

// auditRegistry wraps the registry's handler: every request that changes
// it (register, delete, compatibility level) is audited as kind "schemas"
// once answered, after the change has reached the engine.
func (d *Daemon) auditRegistry(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !registryChange(r) {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		var err error
		if rec.status >= 400 {
			e := &registryFailure{status: rec.status}
			if json.Unmarshal(rec.body.Bytes(), &e.body) != nil || e.body.Code == "" {
				e.body = api.Error{ErrorCode: rec.status, Message: http.StatusText(rec.status), Code: "error"}
			}
			err = e
		} else {
			d.schemas.waitPushed(SchemaPushWaitMax)
		}
		d.audit(r, "schemas", strings.ToLower(r.Method), strings.TrimPrefix(r.URL.Path, RegistryPrefix), err)
	})
}

// registryChange tells the registry requests that change state: lookups
// (POST /subjects/S) and compatibility checks are POSTs that do not.
func registryChange(r *http.Request) bool {
	p := strings.TrimPrefix(r.URL.Path, RegistryPrefix)
	switch r.Method {
	case http.MethodPut, http.MethodDelete:
		return true
	case http.MethodPost:
		return strings.HasPrefix(p, "/subjects/") && strings.HasSuffix(p, "/versions")
	}
	return false
}

// registryFailure is a registry answer of 4xx or 5xx, for the audit line.
type registryFailure struct {
	status int
	body   api.Error
}

func (e *registryFailure) Error() string { return e.body.Message }

// statusRecorder keeps the status a handler wrote and the start of an error
// body (the audit line names its code).
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// errorBodyKeptMax bounds the error body kept for the audit line.
const errorBodyKeptMax = 4 << 10

func (s *statusRecorder) WriteHeader(st int) {
	s.status = st
	s.ResponseWriter.WriteHeader(st)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status >= 400 && s.body.Len() < errorBodyKeptMax {
		s.body.Write(b[:min(len(b), errorBodyKeptMax-s.body.Len())])
	}
	return s.ResponseWriter.Write(b)
}

// reloadWhat summarises a reload for the audit line.
func reloadWhat(res api.ReloadResult) string {
	what := "applied: " + strings.Join(res.Applied, ",")
	if len(res.RestartRequired) > 0 {
		what += "; restart required: " + strings.Join(res.RestartRequired, ",")
	}
	return what
}
