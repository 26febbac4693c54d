package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// ContentType is what the handler answers with, as Confluent does.
const ContentType = "application/vnd.schemaregistry.v1+json"

// RequestBodyBytesMax bounds a request body: a schema at its size limit,
// JSON-escaped, plus references.
const RequestBodyBytesMax = 4*compat.SchemaBytesMax + 64<<10

// ConfigBodyBytesMax bounds the body of PUT /config.
const ConfigBodyBytesMax = 64 << 10

type handler struct {
	reg *Registry
	mux *http.ServeMux
}

// NewHandler serves reg over the Confluent Schema Registry REST API. Mount
// it at the root of a listener or under a prefix with http.StripPrefix.
func NewHandler(reg *Registry) http.Handler {
	h := &handler{reg: reg, mux: http.NewServeMux()}
	m := h.mux
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]any{}) })
	m.HandleFunc("GET /subjects", h.listSubjects)
	m.HandleFunc("GET /subjects/{subject}/versions", h.listVersions)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}", h.getVersion)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}/schema", h.getVersionSchema)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}/referencedby", h.referencedBy)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}/contract", h.contract)
	m.HandleFunc("GET /subjects/{subject}/diff", h.diff)
	m.HandleFunc("POST /subjects/{subject}/versions", h.register)
	m.HandleFunc("POST /subjects/{subject}", h.lookup)
	m.HandleFunc("DELETE /subjects/{subject}", h.deleteSubject)
	m.HandleFunc("DELETE /subjects/{subject}/versions/{version}", h.deleteVersion)
	m.HandleFunc("GET /schemas/ids/{id}", h.schemaByID)
	m.HandleFunc("GET /schemas/ids/{id}/schema", h.schemaTextByID)
	m.HandleFunc("GET /schemas/ids/{id}/versions", h.versionsByID)
	m.HandleFunc("GET /schemas/ids/{id}/subjects", h.subjectsByID)
	m.HandleFunc("GET /schemas/types", h.types)
	m.HandleFunc("POST /compatibility/subjects/{subject}/versions/{version}", h.compatVersion)
	m.HandleFunc("POST /compatibility/subjects/{subject}/versions", h.compatAll)
	m.HandleFunc("GET /config", h.getConfig)
	m.HandleFunc("PUT /config", h.putConfig)
	m.HandleFunc("DELETE /config", h.deleteConfig)
	m.HandleFunc("GET /config/{subject}", h.getConfig)
	m.HandleFunc("PUT /config/{subject}", h.putConfig)
	m.HandleFunc("DELETE /config/{subject}", h.deleteConfig)
	m.HandleFunc("GET /mode", h.getMode)
	m.HandleFunc("GET /mode/{subject}", h.getMode)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "" { // mounted with http.StripPrefix and asked for the prefix itself
		r2 := *r
		u := *r.URL
		u.Path, u.RawPath = "/", ""
		r2.URL = &u
		r = &r2
	}
	// Unknown routes and wrong methods get a JSON error body like every
	// other failure; the mux decides which (404 or 405 with Allow).
	if _, pattern := h.mux.Handler(r); pattern == "" {
		probe := &statusProbe{header: http.Header{}}
		h.mux.ServeHTTP(probe, r)
		if allow := probe.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		st := probe.status
		if st == 0 {
			st = http.StatusNotFound
		}
		writeError(w, &Error{Code: st, Status: st, Message: fmt.Sprintf("HTTP %d %s", st, http.StatusText(st))})
		return
	}
	h.mux.ServeHTTP(w, r)
}

// statusProbe records what the mux would answer and drops the body.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header         { return p.header }
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(st int)          { p.status = st }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error_code":50001,"message":"response encoding failed"}`)
	}
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(status)
	w.Write(b)
}

// writeError answers with the error body the admin API shares (api.Error):
// Confluent's error_code and message, plus code, the cause by name.
func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errStore(err)
	}
	if e.Status == http.StatusServiceUnavailable || e.Status == http.StatusGatewayTimeout {
		w.Header().Set("Retry-After", "1")
	}
	body := api.Error{ErrorCode: e.Code, Message: e.Message, Code: CodeName(e.Code), Messages: e.Messages}
	if len(e.Differences) > 0 {
		body.Differences = apiDifferences(e.Differences)
	}
	api.WriteError(w, e.Status, ContentType, body)
}

// readBody reads at most limit bytes of r's body; more is too_large (413).
func readBody(r *http.Request, limit int64) ([]byte, *Error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, &Error{Code: 400, Status: http.StatusBadRequest, Message: fmt.Sprintf("cannot read request body: %v", err)}
	}
	if int64(len(body)) > limit {
		return nil, errTooLarge(limit)
	}
	return body, nil
}

func flag(r *http.Request, name string) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get(name))
	return v
}

func parseVersion(s string) (int, *Error) {
	if s == "latest" {
		return Latest, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v == 0 || v < -1 || v > VersionMax {
		return 0, errInvalidVersion(s)
	}
	return v, nil
}

type schemaRequest struct {
	Schema     string      `json:"schema"`
	SchemaType string      `json:"schemaType"`
	References []Reference `json:"references"`
}

func readSchema(r *http.Request) (SchemaInput, *Error) {
	body, rerr := readBody(r, RequestBodyBytesMax)
	if rerr != nil {
		return SchemaInput{}, rerr
	}
	var req schemaRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return SchemaInput{}, &Error{Code: 400, Status: http.StatusBadRequest, Message: fmt.Sprintf("Unrecognized request body: %v", err)}
	}
	t, err := compat.ParseType(req.SchemaType)
	if err != nil {
		return SchemaInput{}, errInvalidSchema("%v", err)
	}
	if req.Schema == "" {
		return SchemaInput{}, errInvalidSchema("Empty schema")
	}
	return SchemaInput{Type: t, Schema: req.Schema, References: req.References}, nil
}

// schemaJSON is the Confluent shape of a schema: schemaType is left out
// for AVRO and references when empty, as Confluent does.
type schemaJSON struct {
	Subject    string      `json:"subject,omitempty"`
	Version    int         `json:"version,omitempty"`
	ID         int         `json:"id,omitempty"`
	SchemaType compat.Type `json:"schemaType,omitempty"`
	References []Reference `json:"references,omitempty"`
	Schema     string      `json:"schema"`
}

func shape(info SchemaInfo) schemaJSON {
	s := schemaJSON{ID: info.ID, Schema: info.Schema, References: info.References}
	if info.Type != compat.Avro {
		s.SchemaType = info.Type
	}
	return s
}

func (h *handler) listSubjects(w http.ResponseWriter, r *http.Request) {
	subs := h.reg.Subjects(flag(r, "deleted"))
	if prefix := r.URL.Query().Get("subjectPrefix"); prefix != "" {
		var kept []string
		for _, s := range subs {
			if strings.HasPrefix(s, prefix) {
				kept = append(kept, s)
			}
		}
		subs = kept
	}
	if subs == nil {
		subs = []string{}
	}
	writeJSON(w, 200, subs)
}

func (h *handler) listVersions(w http.ResponseWriter, r *http.Request) {
	vs, err := h.reg.Versions(r.PathValue("subject"), flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, vs)
}

func (h *handler) version(w http.ResponseWriter, r *http.Request) (SubjectVersion, bool) {
	v, e := parseVersion(r.PathValue("version"))
	if e != nil {
		writeError(w, e)
		return SubjectVersion{}, false
	}
	sv, err := h.reg.Version(r.PathValue("subject"), v, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return SubjectVersion{}, false
	}
	return sv, true
}

func (h *handler) getVersion(w http.ResponseWriter, r *http.Request) {
	sv, ok := h.version(w, r)
	if !ok {
		return
	}
	out := shape(sv.SchemaInfo)
	out.Subject, out.Version = sv.Subject, sv.Version
	writeJSON(w, 200, out)
}

func (h *handler) getVersionSchema(w http.ResponseWriter, r *http.Request) {
	sv, ok := h.version(w, r)
	if !ok {
		return
	}
	writeRaw(w, sv.Schema)
}

// writeRaw answers with the schema text itself, as Confluent's /schema
// endpoints do.
func writeRaw(w http.ResponseWriter, text string) {
	w.Header().Set("Content-Type", ContentType)
	w.WriteHeader(200)
	io.WriteString(w, text)
}

func (h *handler) referencedBy(w http.ResponseWriter, r *http.Request) {
	v, e := parseVersion(r.PathValue("version"))
	if e != nil {
		writeError(w, e)
		return
	}
	ids, err := h.reg.ReferencedBy(r.PathValue("subject"), v)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, ids)
}

func (h *handler) register(w http.ResponseWriter, r *http.Request) {
	in, e := readSchema(r)
	if e != nil {
		writeError(w, e)
		return
	}
	id, _, err := h.reg.Register(r.Context(), r.PathValue("subject"), in)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, map[string]int{"id": id})
}

func (h *handler) lookup(w http.ResponseWriter, r *http.Request) {
	in, e := readSchema(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sv, err := h.reg.Lookup(r.PathValue("subject"), in, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := shape(sv.SchemaInfo)
	out.Subject, out.Version = sv.Subject, sv.Version
	writeJSON(w, 200, out)
}

func (h *handler) deleteSubject(w http.ResponseWriter, r *http.Request) {
	vs, err := h.reg.DeleteSubject(r.Context(), r.PathValue("subject"), flag(r, "permanent"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, vs)
}

func (h *handler) deleteVersion(w http.ResponseWriter, r *http.Request) {
	v, e := parseVersion(r.PathValue("version"))
	if e != nil {
		writeError(w, e)
		return
	}
	n, err := h.reg.DeleteVersion(r.Context(), r.PathValue("subject"), v, flag(r, "permanent"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, n)
}

func (h *handler) schemaID(w http.ResponseWriter, r *http.Request) (int, bool) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 1 {
		writeError(w, errSchemaNotFound())
		return 0, false
	}
	return id, true
}

func (h *handler) schemaByID(w http.ResponseWriter, r *http.Request) {
	id, ok := h.schemaID(w, r)
	if !ok {
		return
	}
	info, err := h.reg.SchemaByID(id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := shape(info)
	out.ID = 0 // Confluent's GET /schemas/ids/{id} carries no id field
	writeJSON(w, 200, out)
}

func (h *handler) schemaTextByID(w http.ResponseWriter, r *http.Request) {
	id, ok := h.schemaID(w, r)
	if !ok {
		return
	}
	info, err := h.reg.SchemaByID(id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeRaw(w, info.Schema)
}

func (h *handler) versionsByID(w http.ResponseWriter, r *http.Request) {
	id, ok := h.schemaID(w, r)
	if !ok {
		return
	}
	vs, err := h.reg.VersionsByID(id, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, vs)
}

func (h *handler) subjectsByID(w http.ResponseWriter, r *http.Request) {
	id, ok := h.schemaID(w, r)
	if !ok {
		return
	}
	vs, err := h.reg.VersionsByID(id, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	subs := []string{}
	for _, v := range vs {
		if len(subs) == 0 || subs[len(subs)-1] != v.Subject {
			subs = append(subs, v.Subject)
		}
	}
	writeJSON(w, 200, subs)
}

func (h *handler) types(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, compat.Types)
}

type compatResponse struct {
	IsCompatible bool      `json:"is_compatible"`
	Messages     *[]string `json:"messages,omitempty"` // only with ?verbose=true
	// Differences that break or warn, with ?verbose=true (not Confluent's).
	Differences *[]api.SchemaDifference `json:"differences,omitempty"`
}

func (h *handler) compat(w http.ResponseWriter, r *http.Request, version int, all bool) {
	in, e := readSchema(r)
	if e != nil {
		writeError(w, e)
		return
	}
	res, err := h.reg.CheckCompatibility(r.PathValue("subject"), version, all, in)
	if err != nil {
		writeError(w, err)
		return
	}
	resp := compatResponse{IsCompatible: res.Compatible()}
	if flag(r, "verbose") {
		msgs := res.Messages
		if msgs == nil {
			msgs = []string{}
		}
		diffs := apiDifferences(res.Differences)
		resp.Messages, resp.Differences = &msgs, &diffs
	}
	writeJSON(w, 200, resp)
}

func (h *handler) compatVersion(w http.ResponseWriter, r *http.Request) {
	v, e := parseVersion(r.PathValue("version"))
	if e != nil {
		writeError(w, e)
		return
	}
	h.compat(w, r, v, false)
}

func (h *handler) compatAll(w http.ResponseWriter, r *http.Request) {
	h.compat(w, r, 0, true)
}

func (h *handler) getConfig(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	level, own := h.reg.Compatibility(subject)
	if subject != "" && !own && !flag(r, "defaultToGlobal") {
		writeError(w, errSubjectConfigNotSet(subject))
		return
	}
	writeJSON(w, 200, map[string]compat.Level{"compatibilityLevel": level})
}

func (h *handler) putConfig(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(r, ConfigBodyBytesMax)
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	var req struct {
		Compatibility string `json:"compatibility"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, &Error{Code: 400, Status: http.StatusBadRequest, Message: fmt.Sprintf("Unrecognized request body: %v", err)})
		return
	}
	level, ok := compat.ParseLevel(req.Compatibility)
	if !ok {
		writeError(w, errInvalidLevel())
		return
	}
	if err := h.reg.SetCompatibility(r.Context(), r.PathValue("subject"), level); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, map[string]compat.Level{"compatibility": level})
}

func (h *handler) deleteConfig(w http.ResponseWriter, r *http.Request) {
	prev, err := h.reg.DeleteCompatibility(r.Context(), r.PathValue("subject"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, 200, map[string]compat.Level{"compatibilityLevel": prev})
}

// getMode is minimal: the registry is always READWRITE.
func (h *handler) getMode(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]string{"mode": "READWRITE"})
}
