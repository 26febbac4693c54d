package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/change"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natskv"
	"github.com/sluice-ai/sluice/go-control/internal/store"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// FleetLink is what the daemon needs of its fleet (internal/fleet).
type FleetLink interface {
	// View is the shared state as this appliance's mirrors hold it now.
	View() (*store.View, error)
	// Commit stores one change composed from view (store.NATS.Commit).
	Commit(ctx context.Context, view *store.View, changeID string, ops ...store.Op) (store.Committed, error)
	// WaitServed returns once this appliance's engine serves bucket at rev
	// or later; false if ctx ended first.
	WaitServed(ctx context.Context, bucket string, rev uint64) bool
}

// ServeWait bounds how long a fleet write, once stored, waits for this
// appliance's own engine to serve it before answering (so that a read on
// the same appliance sees it). The answer is 2xx either way: the change is
// stored and every appliance serves it.
const ServeWait = 2 * time.Second

// Response headers of a fleet write.
const (
	HeaderIdempotencyKey = "Idempotency-Key"    // request: the client's change id
	HeaderChangeID       = "Sluice-Change-Id"   // the change id used
	HeaderRevision       = "Sluice-Revision"    // the bucket revision holding it
	HeaderBucket         = "Sluice-Bucket"      // the bucket
	HeaderDuplicate      = "Sluice-Duplicate"   // "true": stored earlier by a call with the same id
	HeaderServedHere     = "Sluice-Served-Here" // "false": stored, this engine not serving it yet
)

// Fleet mode, save before serve: a change is composed into this
// appliance's whole config as the store would hold it, validated whole,
// stored (compare-and-set against the view it was composed from), and only
// then served, by the fleet loop, from the store, as on every appliance.
// Nothing here touches the engine.
func (s *state) fleetChange(ctx context.Context, edit func(v *store.View, o *overrides) ([]store.Op, error)) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	view, err := s.link.View()
	if err != nil {
		return err
	}
	o, err := loadOverrides(view)
	if err != nil {
		return err
	}
	ops, err := edit(view, o)
	if err != nil {
		return err
	}
	s.mu.Lock()
	file, running := s.file, s.eff
	s.mu.Unlock()
	next := compose(file, o)
	keepStatic(next, running)
	if err := validate(next); err != nil {
		return err
	}
	id := change.NewID()
	if rec := change.From(ctx); rec != nil {
		id = rec.ID
	}
	c, err := s.link.Commit(ctx, view, id, ops...)
	if err != nil {
		return err
	}
	change.Note(ctx, c.Bucket, c.Revision, c.Duplicate)
	wctx, cancel := context.WithTimeout(ctx, ServeWait)
	defer cancel()
	if !s.link.WaitServed(wctx, c.Bucket, c.Revision) {
		if rec := change.From(ctx); rec != nil {
			rec.NotServedHere()
		}
		s.log.Warn("change stored; this engine does not serve it yet", "change", id, "bucket", c.Bucket, "revision", c.Revision)
	}
	return nil
}

func jsonOp(key string, v any) ([]store.Op, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errs.ErrInternal, err)
	}
	return []store.Op{{Key: key, Value: b}}, nil
}

func (s *state) fleetSetRoutes(ctx context.Context, routes []config.Route) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		o.routes = nonNil(routes)
		return jsonOp(keyRoutes, o.routes)
	})
}

func (s *state) fleetResetRoutes(ctx context.Context) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		o.routes = nil
		return []store.Op{{Key: keyRoutes, Delete: true}}, nil
	})
}

// fleetSetTenants: an entry without a key keeps the key the shared state
// (or the file) holds for the tenant of the same name.
func (s *state) fleetSetTenants(ctx context.Context, ts []config.Tenant) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		s.mu.Lock()
		current := compose(s.file, o).Tenants
		s.mu.Unlock()
		for i := range ts {
			keepCredentials(&ts[i], current)
			if ts[i].Key == "" {
				return nil, fmt.Errorf("%w: tenants[%d].key: is required for new tenant %q", errs.ErrInvalidConfig, i, ts[i].Name)
			}
		}
		o.tenants = nonNil(ts)
		return jsonOp(keyTenants, o.tenants)
	})
}

func (s *state) fleetLoadModel(ctx context.Context, m config.Model) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		s.mu.Lock()
		have := compose(s.file, o).Models
		s.mu.Unlock()
		if slices.ContainsFunc(have, func(x config.Model) bool { return x.Name == m.Name && x.Version == m.Version }) {
			return nil, fmt.Errorf("%w: model %s version %s is loaded", errs.ErrAlreadyExists, m.Name, m.Version)
		}
		o.models = append(o.models, m)
		delete(o.modelGone, [2]string{m.Name, m.Version})
		ops, err := jsonOp(prefixModel+enc(m.Name, m.Version), m)
		return append(ops, store.Op{Key: prefixModelGone + enc(m.Name, m.Version), Delete: true}), err
	})
}

// fleetUnloadModel: a model of the file stays out through a modelgone key.
func (s *state) fleetUnloadModel(ctx context.Context, name, version string) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		match := func(x config.Model) bool { return x.Name == name && x.Version == version }
		s.mu.Lock()
		have := compose(s.file, o).Models
		inFile := slices.ContainsFunc(s.file.Models, match)
		s.mu.Unlock()
		if !slices.ContainsFunc(have, match) {
			return nil, fmt.Errorf("%w: model %s version %s is not loaded", errs.ErrNotFound, name, version)
		}
		o.models = slices.DeleteFunc(o.models, match)
		ops := []store.Op{{Key: prefixModel + enc(name, version), Delete: true}}
		if inFile {
			o.modelGone[[2]string{name, version}] = true
			gone, err := jsonOp(prefixModelGone+enc(name, version), modelRef{name, version})
			if err != nil {
				return nil, err
			}
			ops = append(ops, gone...)
		}
		return ops, nil
	})
}

func (s *state) fleetSetAlias(ctx context.Context, model, alias, version string) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		s.mu.Lock()
		have := compose(s.file, o).Models
		s.mu.Unlock()
		if !slices.ContainsFunc(have, func(x config.Model) bool { return x.Name == model && x.Version == version }) {
			return nil, fmt.Errorf("%w: model %s version %s is not loaded", errs.ErrNotFound, model, version)
		}
		rec := aliasRec{model, alias, version}
		o.aliases = append(o.aliases, rec)
		return jsonOp(prefixAlias+enc(model, alias), rec)
	})
}

func (s *state) fleetAddPeer(ctx context.Context, p config.Peer) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		s.mu.Lock()
		have := compose(s.file, o).Peers
		s.mu.Unlock()
		if slices.ContainsFunc(have, func(x config.Peer) bool { return x.Name == p.Name }) {
			return nil, fmt.Errorf("%w: peer %q", errs.ErrAlreadyExists, p.Name)
		}
		o.peers = append(o.peers, p)
		delete(o.peerGone, p.Name)
		ops, err := jsonOp(prefixPeer+enc(p.Name), p)
		return append(ops, store.Op{Key: prefixPeerGone + enc(p.Name), Delete: true}), err
	})
}

func (s *state) fleetRemovePeer(ctx context.Context, name string) error {
	return s.fleetChange(ctx, func(_ *store.View, o *overrides) ([]store.Op, error) {
		s.mu.Lock()
		have := compose(s.file, o).Peers
		inFile := slices.ContainsFunc(s.file.Peers, func(x config.Peer) bool { return x.Name == name })
		s.mu.Unlock()
		if !slices.ContainsFunc(have, func(x config.Peer) bool { return x.Name == name }) {
			return nil, fmt.Errorf("%w: peer %q", errs.ErrNotFound, name)
		}
		o.peers = slices.DeleteFunc(o.peers, func(x config.Peer) bool { return x.Name == name })
		ops := []store.Op{{Key: prefixPeer + enc(name), Delete: true}}
		if inFile {
			o.peerGone[name] = true
			ops = append(ops, store.Op{Key: prefixPeerGone + enc(name), Value: []byte(name)})
		}
		return ops, nil
	})
}

// ReloadFrom applies the file and the fleet's shared state as view holds it
// (the fleet loop's path; SIGHUP reads the live mirrors instead). It is
// audited as who=fleet.
func (d *Daemon) ReloadFrom(view *store.View) (api.ReloadResult, error) {
	res, err := d.state.reloadFrom(view)
	d.auditAs("fleet", "reload", "reload", reloadWhat(res), err)
	d.traceChange(context.Background(), "fleet", "reload", "reload", reloadWhat(res), outcomeOf(err), err)
	return res, err
}

// fleetStatus maps the outcomes of a fleet write to their HTTP status.
func fleetStatus(err error) (int, bool) {
	switch {
	case errors.Is(err, errs.ErrOutcomeUnknown):
		return http.StatusGatewayTimeout, true
	case errors.Is(err, errs.ErrConflict):
		return http.StatusConflict, true
	case errors.Is(err, errs.ErrUnavailable):
		return http.StatusServiceUnavailable, true
	}
	return 0, false
}

// outcomeFields adds what a client needs to act on a fleet outcome: when
// to retry, and which change to check.
func outcomeFields(w http.ResponseWriter, err error, doc *api.Error) {
	switch {
	case errors.Is(err, errs.ErrOutcomeUnknown), errors.Is(err, errs.ErrConflict):
		w.Header().Set("Retry-After", "1")
	}
	var u *natskv.UnknownError
	if errors.As(err, &u) {
		doc.Change = &api.Outcome{ID: u.ChangeID, Bucket: u.Bucket, Keys: u.Keys, BaseRevisions: u.Base,
			RepeatWithin: natskv.DuplicateWindow.String()}
	}
}

// changeMiddleware gives every write call a change record: the client's
// Idempotency-Key or a fresh id. The record travels in the request's
// context to whatever stores the change (the fleet store, the registry's
// store), and the answer carries the id and where it landed.
func changeMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !writes(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		// A header that is present must be a valid id, empty included: only
		// an absent header gets a fresh one.
		id, given := r.Header.Get(HeaderIdempotencyKey), len(r.Header.Values(HeaderIdempotencyKey)) > 0
		if !given {
			id = change.NewID()
		} else if err := change.Check(id); err != nil {
			refuseChangeID(w, r, err)
			return
		}
		rec := &change.Record{ID: id}
		next.ServeHTTP(&changeWriter{ResponseWriter: w, rec: rec}, r.WithContext(change.With(r.Context(), rec)))
	})
}

// changeIDCheck refuses a malformed Idempotency-Key where no change record
// is kept (one host, no fleet): the header means nothing there, but a
// client's bad key is answered the same in both modes.
func changeIDCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if vs := r.Header.Values(HeaderIdempotencyKey); len(vs) > 0 && writes(r.Method) {
			if err := change.Check(vs[0]); err != nil {
				refuseChangeID(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refuseChangeID answers a malformed Idempotency-Key with 400, in the
// registry's content type on its paths (its clients read no other).
func refuseChangeID(w http.ResponseWriter, r *http.Request, err error) {
	if r.URL.Path == RegistryPrefix || strings.HasPrefix(r.URL.Path, RegistryPrefix+"/") {
		api.WriteError(w, http.StatusBadRequest, registry.ContentType,
			api.Error{ErrorCode: http.StatusBadRequest, Message: err.Error(), Code: errs.Name(err)})
		return
	}
	writeErr(w, err)
}

// writes reports whether a call of this method may change state.
func writes(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// changeWriter adds the change headers as the answer starts.
type changeWriter struct {
	http.ResponseWriter
	rec  *change.Record
	done bool
}

func (c *changeWriter) WriteHeader(code int) {
	if !c.done {
		c.done = true
		h := c.Header()
		h.Set(HeaderChangeID, c.rec.ID)
		if bucket, rev, dup, written := c.rec.Snapshot(); written {
			h.Set(HeaderBucket, bucket)
			h.Set(HeaderRevision, strconv.FormatUint(rev, 10))
			if dup {
				h.Set(HeaderDuplicate, "true")
			}
			if !c.rec.ServedHere() {
				h.Set(HeaderServedHere, "false")
			}
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *changeWriter) Write(b []byte) (int, error) {
	if !c.done {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(b)
}

// flush returns once every schema change heard so far is in the engine
// (the fleet's schema loop records a revision as served only then).
func (s *schemaSync) flush(ctx context.Context) error {
	timeout := ServeWait
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if s.waitPushed(timeout) {
		return nil
	}
	s.mu.Lock()
	lastErr := s.lastErr
	s.mu.Unlock()
	if lastErr != nil {
		return fmt.Errorf("schemas not in the engine yet: %w", lastErr)
	}
	return fmt.Errorf("%w: schemas not in the engine yet", errs.ErrTimeout)
}
