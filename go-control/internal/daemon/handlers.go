package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// The admin API's handlers, one method per route (see routes). Every
// control change ends in d.audit: one log line and a counter.

func (d *Daemon) getStatus(w http.ResponseWriter, r *http.Request) {
	st, err := d.eng.Status()
	if err != nil {
		writeErr(w, err)
		return
	}
	s := d.state
	s.mu.Lock()
	doc := api.StatusDoc{Engine: st, Daemon: api.DaemonStatus{
		Version: Version, Config: s.path, Engine: d.engineName, Store: s.eff.Control.Store,
		UptimeS: int64(time.Since(s.started) / time.Second), ReloadsOK: s.reloadsOK, ReloadsFailed: s.reloadsKO,
	}}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, doc)
}

func (d *Daemon) getWorkers(w http.ResponseWriter, r *http.Request) {
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
	out := make([]api.WorkerDoc, 0, len(st.Workers))
	for _, wi := range st.Workers {
		doc := api.WorkerDoc{WorkerInfo: wi}
		for i := range stats.Workers {
			if stats.Workers[i].Index == wi.Index {
				doc.Stats = &stats.Workers[i]
			}
		}
		out = append(out, doc)
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) getShards(w http.ResponseWriter, r *http.Request) {
	stats, err := d.eng.Stats()
	if err != nil {
		writeErr(w, err)
		return
	}
	cfg := d.state.snapshot()
	out := make([]api.ShardDoc, 0, len(cfg.Shards))
	for _, sh := range cfg.Shards {
		doc := api.ShardDoc{Name: sh.Name, Labels: sh.Labels, MaxConcurrency: sh.MaxConcurrency, QueueDepth: sh.QueueDepth,
			BatchMax: sh.BatchMax, BatchDelayUs: sh.BatchDelayUs,
			Workers: sh.Workers, Local: carries(cfg.Host.Labels, sh.Labels)}
		for i := range stats.Shards {
			if stats.Shards[i].Name == sh.Name {
				doc.Stats = &stats.Shards[i]
			}
		}
		out = append(out, doc)
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) getRoutes(w http.ResponseWriter, r *http.Request) {
	s := d.state
	s.mu.Lock()
	doc := api.RoutesDoc{Source: "file", Routes: nonNil(s.eff.Clone().Routes)}
	if _, err := s.st.Get(keyRoutes); err == nil {
		doc.Source = "api"
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, doc)
}

// putRoutes takes a bare array of routes or a RoutesDoc.
func (d *Daemon) putRoutes(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := decode(w, r, &raw); err != nil {
		d.audit(r, "routes", "set", "", err)
		return
	}
	var routes []config.Route
	var err error
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
		err = decodeBytes(t, &routes)
	} else {
		// Routes is a pointer so a missing key is told from an empty list:
		// only "routes": [] clears them.
		var doc struct {
			Source string          `json:"source"`
			Routes *[]config.Route `json:"routes"`
		}
		err = decodeBytes(t, &doc)
		switch {
		case err == nil && doc.Routes == nil:
			err = fmt.Errorf("%w: body must be an array of routes or {\"routes\": [...]} (an empty array clears them)", errs.ErrInvalidArgument)
		case err == nil:
			routes = *doc.Routes
		}
	}
	if err == nil {
		err = d.state.setRoutes(r.Context(), routes)
	}
	d.audit(r, "routes", "set", fmt.Sprintf("%d routes", len(routes)), err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.RoutesDoc{Source: "api", Routes: nonNil(routes)})
}

func (d *Daemon) deleteRoutes(w http.ResponseWriter, r *http.Request) {
	err := d.state.resetRoutes(r.Context())
	d.audit(r, "routes", "reset", "back to the file's routes", err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) getTenants(w http.ResponseWriter, r *http.Request) {
	cfg := d.state.snapshot()
	out := make([]api.TenantView, 0, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		out = append(out, api.TenantView{Name: t.Name, ID: t.ID, Models: nonNil(t.Models), Adapters: nonNil(t.Adapters),
			Routes: nonNil(t.Routes), Subjects: nonNil(t.Subjects)})
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) putTenants(w http.ResponseWriter, r *http.Request) {
	var ts []config.Tenant
	err := decode(w, r, &ts)
	if err != nil {
		d.audit(r, "tenants", "set", "", err)
		return
	}
	if ts == nil { // JSON null: refused, it would remove every tenant by accident
		err = fmt.Errorf("%w: body must be an array of tenants ([] removes them all)", errs.ErrInvalidArgument)
		d.audit(r, "tenants", "set", "", err)
		writeErr(w, err)
		return
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	err = d.state.setTenants(r.Context(), ts)
	d.audit(r, "tenants", "set", fmt.Sprintf("%d tenants %v", len(ts), names), err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) getModels(w http.ResponseWriter, r *http.Request) {
	ms, err := d.eng.Models()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nonNil(ms))
}

func (d *Daemon) postModel(w http.ResponseWriter, r *http.Request) {
	var m config.Model
	if err := decode(w, r, &m); err != nil {
		d.audit(r, "models", "load", "", err)
		return
	}
	err := d.state.loadModel(r.Context(), m)
	d.audit(r, "models", "load", m.Name+" "+m.Version+" ("+m.Kind+")", err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, m)
}

func (d *Daemon) deleteModel(w http.ResponseWriter, r *http.Request) {
	name, version := r.PathValue("name"), r.PathValue("version")
	err := d.state.unloadModel(r.Context(), name, version)
	d.audit(r, "models", "unload", name+" "+version, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) putAlias(w http.ResponseWriter, r *http.Request) {
	model, alias := r.PathValue("name"), r.PathValue("alias")
	var b api.AliasBody
	err := decode(w, r, &b)
	if err != nil {
		d.audit(r, "aliases", "set", model+" "+alias, err)
		return
	}
	if b.Version == "" {
		err = fmt.Errorf("%w: version is required", errs.ErrInvalidArgument)
	} else {
		err = d.state.setAlias(r.Context(), model, alias, b.Version)
	}
	d.audit(r, "aliases", "set", model+" "+alias+" -> "+b.Version, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.AliasDoc{Model: model, Alias: alias, Version: b.Version})
}

func (d *Daemon) getPeers(w http.ResponseWriter, r *http.Request) {
	ps, err := d.eng.Peers()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nonNil(ps))
}

func (d *Daemon) postPeer(w http.ResponseWriter, r *http.Request) {
	var p config.Peer
	err := decode(w, r, &p)
	if err != nil {
		d.audit(r, "peers", "add", "", err)
		return
	}
	err = d.state.addPeer(r.Context(), p)
	d.audit(r, "peers", "add", p.Name+" "+p.Address, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

func (d *Daemon) deletePeer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	err := d.state.removePeer(r.Context(), name)
	d.audit(r, "peers", "remove", name, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) getConnections(w http.ResponseWriter, r *http.Request) {
	cs, err := d.eng.Connections()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nonNil(cs))
}

func (d *Daemon) deleteConnection(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("id")
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil {
		err = fmt.Errorf("%w: connection id %q is not a decimal id from GET /v1/connections", errs.ErrInvalidArgument, raw)
	} else {
		err = d.eng.CloseConnection(id)
	}
	d.audit(r, "connections", "close", raw, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The disconnect is under way; the connection may be listed as
	// "closing" until its worker has let go of it.
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) getStats(w http.ResponseWriter, r *http.Request) {
	st, err := d.eng.Stats()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (d *Daemon) postReload(w http.ResponseWriter, r *http.Request) {
	res, err := d.state.reload()
	d.audit(r, "reload", "reload", reloadWhat(res), err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (d *Daemon) getOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", contentType)
	w.Write(api.OpenAPI)
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
