package registry

import (
	"encoding/json"
	"net/http"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

func apiDifference(version int, d compat.Difference) api.SchemaDifference {
	return api.SchemaDifference{Version: version, Path: d.Path, Rule: d.Rule, Backward: string(d.Backward), Forward: string(d.Forward),
		Message: d.Message, ForwardRule: d.ForwardRule, ForwardMessage: d.ForwardMessage, Category: d.Category}
}

func apiDifferences(ds []compat.VersionDifference) []api.SchemaDifference {
	out := make([]api.SchemaDifference, len(ds))
	for i, d := range ds {
		out[i] = apiDifference(d.Version, d.Difference)
	}
	return out
}

// contract answers GET /subjects/{s}/versions/{v}/contract: the snapshot
// stored with the version.
func (h *handler) contract(w http.ResponseWriter, r *http.Request) {
	v, e := parseVersion(r.PathValue("version"))
	if e != nil {
		writeError(w, e)
		return
	}
	sv, c, err := h.reg.Contract(r.PathValue("subject"), v, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	doc := api.ContractDoc{Subject: sv.Subject, Version: sv.Version, ID: sv.ID, SchemaType: string(c.SchemaType),
		Canonical: c.Canonical, Fingerprint: c.Fingerprint, FieldsTruncated: c.FieldsTruncated, Fields: make([]api.ContractField, len(c.Fields))}
	for i, f := range c.Fields {
		doc.Fields[i] = api.ContractField{Path: f.Path, Name: f.Name, Type: f.Type, Required: f.Required, Deprecated: f.Deprecated}
	}
	if c.Signature != nil {
		if b, err := json.Marshal(c.Signature); err == nil {
			doc.Signature = b
		}
	}
	writeJSON(w, 200, doc)
}

// diff answers GET /subjects/{s}/diff?from=V1&to=V2: every difference
// between two versions with its verdict in both directions. to defaults
// to the latest version, from to the version before to.
func (h *handler) diff(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	to, from := Latest, 0
	if s := q.Get("to"); s != "" {
		v, e := parseVersion(s)
		if e != nil {
			writeError(w, e)
			return
		}
		to = v
	}
	if s := q.Get("from"); s != "" {
		v, e := parseVersion(s)
		if e != nil {
			writeError(w, e)
			return
		}
		from = v
	}
	res, err := h.reg.Diff(r.PathValue("subject"), from, to, flag(r, "deleted"))
	if err != nil {
		writeError(w, err)
		return
	}
	doc := api.DiffDoc{Subject: res.To.Subject, From: res.From.Version, To: res.To.Version, SchemaType: string(res.To.Type),
		Compatibility: string(res.Level), Compatible: res.Compatible, Differences: make([]api.SchemaDifference, len(res.Differences))}
	for i, d := range res.Differences {
		doc.Differences[i] = apiDifference(0, d)
	}
	writeJSON(w, 200, doc)
}
