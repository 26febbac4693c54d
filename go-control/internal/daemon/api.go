package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"golang.org/x/sys/unix"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
)

// BodySizeMax bounds an admin request body, in bytes.
const BodySizeMax = 1 << 20

// Version is the daemon's version, reported by /v1/status.
const Version = "0.1.0"

// contentType is what the admin API answers with.
const contentType = "application/json"

func httpStatus(err error) int {
	if code, ok := fleetStatus(err); ok {
		return code
	}
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
		writeAPIError(w, http.StatusInternalServerError, "internal", "encoding the response failed")
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeAPIError(w http.ResponseWriter, status int, code, msg string) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	api.WriteError(w, status, contentType, api.Error{ErrorCode: status, Message: msg, Code: code})
}

func writeErr(w http.ResponseWriter, err error) {
	status := httpStatus(err)
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	e := api.Error{ErrorCode: status, Message: err.Error(), Code: errs.Name(err)}
	outcomeFields(w, err, &e) // fleet writes: when to retry, which change to check
	api.WriteError(w, status, contentType, e)
}

// errTooLarge marks a body over BodySizeMax: 413, code too_large.
var errTooLarge = fmt.Errorf("%w: request body is over %d bytes", errs.ErrInvalidArgument, BodySizeMax)

// decode reads a bounded JSON body into v, refusing unknown fields; on
// failure it has answered.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, BodySizeMax))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeAPIError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, errTooLarge.Error())
			return errTooLarge
		}
		err = fmt.Errorf("%w: reading body: %w", errs.ErrInvalidArgument, err)
		writeErr(w, err)
		return err
	}
	if err := decodeBytes(body, v); err != nil {
		writeErr(w, err)
		return err
	}
	return nil
}

func decodeBytes(body []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("%w: bad JSON: %w", errs.ErrInvalidArgument, err)
	}
	if d.More() {
		return fmt.Errorf("%w: bad JSON: trailing data", errs.ErrInvalidArgument)
	}
	return nil
}

// route is one admin API pattern and its handler method.
type route struct {
	pattern string
	handler http.Handler
}

// routeTable lists every admin path (the registry is mounted beside it);
// internal/api/openapi.json documents each, checked by a test.
func (d *Daemon) routeTable() []route {
	f := func(p string, h http.HandlerFunc) route { return route{p, h} }
	return []route{
		f("GET /v1/status", d.getStatus),
		f("GET /v1/workers", d.getWorkers),
		f("GET /v1/shards", d.getShards),
		f("GET /v1/routes", d.getRoutes),
		f("PUT /v1/routes", d.putRoutes),
		f("DELETE /v1/routes", d.deleteRoutes),
		f("GET /v1/tenants", d.getTenants),
		f("PUT /v1/tenants", d.putTenants),
		f("GET /v1/models", d.getModels),
		f("GET /v1/models/{name}", d.modelMeta),
		f("POST /v1/models", d.postModel),
		f("DELETE /v1/models/{name}/versions/{version}", d.deleteModel),
		f("PUT /v1/models/{name}/aliases/{alias}", d.putAlias),
		f("GET /v1/peers", d.getPeers),
		f("POST /v1/peers", d.postPeer),
		f("DELETE /v1/peers/{name}", d.deletePeer),
		f("GET /v1/backends", d.getBackends),
		f("POST /v1/backends/{pool}/endpoints", d.postEndpoint),
		f("DELETE /v1/backends/{pool}/endpoints", d.deleteEndpoint),
		f("POST /v1/backends/{pool}/endpoints/drain", d.drainEndpoint),
		f("POST /v1/backends/{pool}/endpoints/undrain", d.undrainEndpoint),
		f("GET /v1/transforms", d.getTransforms),
		f("PUT /v1/transforms/{subject}/{from}/{to}", d.putTransform),
		f("DELETE /v1/transforms/{subject}/{from}/{to}", d.deleteTransform),
		f("GET /v1/connections", d.getConnections),
		f("DELETE /v1/connections/{id}", d.deleteConnection),
		f("GET /v1/stats", d.getStats),
		f("POST /v1/reload", d.postReload),
		f("GET /v1/jobs", d.getJobs),
		f("GET /v1/load", d.getLoad),
		f("GET /v1/load/fleet", d.getFleetLoad),
		f("GET /ui/heatmap", heatmap.ServePage),
		f("GET /openapi.json", d.getOpenAPI),
		{"GET /metrics", d.metricsHandler()},
	}
}

// routes maps every admin path to its handler method.
func (d *Daemon) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, r := range d.routeTable() {
		mux.Handle(r.pattern, r.handler)
	}
	return mux
}

// jsonMisses answers paths and methods mux does not serve with the JSON
// error body (404, or 405 with Allow) instead of the mux's plain text.
func jsonMisses(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &statusProbe{header: http.Header{}}
		mux.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		if probe.status == http.StatusMethodNotAllowed {
			writeAPIError(w, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
			return
		}
		writeAPIError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no such path: %s (the API is listed at /openapi.json)", r.URL.Path))
	})
}

// statusProbe records what the mux would answer and drops the body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(st int)          { p.status = st }

// openPaths are served without the token: the heatmap page holds no data
// (it reads /v1/load, which needs the token, passed in the URL fragment).
var openPaths = map[string]bool{"GET /ui/heatmap": true}

// requireToken wraps h with bearer-token auth when token is set. A wrong or
// missing token gets 401 with the JSON error body.
func requireToken(token string, refused *refusals, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	// Digests have a fixed length, so the comparison leaks nothing, not even
	// the token's length.
	want := sha256.Sum256([]byte("Bearer " + token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.Method+" "+r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			refused.add(refusedToken)
			w.Header().Set("WWW-Authenticate", "Bearer")
			writeAPIError(w, http.StatusUnauthorized, api.CodeUnauthorized, "unauthorized: send the admin token as Authorization: Bearer TOKEN")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// peerKey carries who is on the other end of a unix-socket connection.
type peerKey struct{}

// connContext notes the credentials of a unix-socket peer (SO_PEERCRED)
// for the audit log; TCP peers are named by address and token.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || cerr != nil {
		return context.WithValue(ctx, peerKey{}, "unix:unknown")
	}
	return context.WithValue(ctx, peerKey{}, fmt.Sprintf("unix:uid=%d,pid=%d", cred.Uid, cred.Pid))
}

// who names the caller of r for the audit log: the unix-socket peer, or the
// token (a fingerprint, never the token) and the remote address.
func who(r *http.Request) string {
	if p, ok := r.Context().Value(peerKey{}).(string); ok {
		return p
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "anonymous@" + r.RemoteAddr
	}
	sum := sha256.Sum256([]byte(auth))
	return "token:" + hex.EncodeToString(sum[:4]) + "@" + r.RemoteAddr
}
