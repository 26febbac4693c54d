package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// Backend endpoints at run time (docs/backends.md, "Endpoints at run
// time"). The pools are the [[backends]] the engine started with (a new
// pool takes a restart); the admin API adds, drains, undrains and removes
// their endpoints. Each change is kept in the store as an overlay on those
// pools, one record per endpoint changed (prefixEndpoint): "added" (in the
// pool, taking requests), "drained" (in the pool, taking nothing new) or
// "removed" (one of the file's, out of the pool); an endpoint without a
// record is as the file has it. The engine is made to serve the overlay
// after it starts, at every reload and, in fleet mode (the shared state's
// "control" bucket), at every fleet resync, so that every appliance serves
// the same endpoints.
const (
	prefixEndpoint = "endpoint."
	// EndpointURLLenMax bounds an endpoint URL (the engine's URL_LEN_MAX).
	EndpointURLLenMax = 256
)

// States of a stored endpoint record.
const (
	endpointAdded   = "added"
	endpointDrained = "drained"
	endpointRemoved = "removed"
)

// endpointRec is the stored record of an endpoint changed through the API.
type endpointRec struct {
	Pool  string `json:"pool"`
	URL   string `json:"url"`
	State string `json:"state"` // added, drained or removed
}

// epKey names an endpoint of a pool.
type epKey struct{ pool, url string }

// endpointKey is the store key of an endpoint's record: a digest, as a
// pool name and a URL together may be longer than a key.
func endpointKey(pool, url string) string {
	d := sha256.Sum256([]byte(pool + "\x00" + url))
	return prefixEndpoint + base64.RawURLEncoding.EncodeToString(d[:])
}

// loadEndpointRecs reads the endpoint records st holds, in key order; a
// record it cannot read is left out and named in the error.
func loadEndpointRecs(st store.Store) ([]endpointRec, error) {
	es, err := st.List(prefixEndpoint)
	if err != nil {
		return nil, err
	}
	var out []endpointRec
	var bad []error
	for _, e := range es {
		var r endpointRec
		err := json.Unmarshal(e.Value, &r)
		if err == nil && r.State != endpointAdded && r.State != endpointDrained && r.State != endpointRemoved {
			err = fmt.Errorf("state %q", r.State)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("%w: store key %s: %w", errs.ErrInternal, e.Key, err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(bad...)
}

// effectiveEndpoints applies recs to the pools of base: the endpoints the
// engine should serve, in order (each pool's from the file, then the ones
// added), and whether each drains. Records of pools base lacks are left
// out.
func effectiveEndpoints(base []config.Backend, recs []endpointRec) ([]epKey, map[epKey]bool) {
	state := make(map[epKey]string, len(recs))
	for _, r := range recs {
		state[epKey{r.Pool, r.URL}] = r.State
	}
	var order []epKey
	draining := map[epKey]bool{}
	take := func(k epKey) {
		if _, dup := draining[k]; !dup && state[k] != endpointRemoved {
			order = append(order, k)
			draining[k] = state[k] == endpointDrained
		}
	}
	for _, b := range base {
		for _, u := range b.Endpoints {
			take(epKey{b.Name, u})
		}
		for _, r := range recs {
			if r.Pool == b.Name {
				take(epKey{r.Pool, r.URL})
			}
		}
	}
	return order, draining
}

// checkEndpointURL checks a URL to add as the engine will: http:// or
// https://, host and port, nothing after.
func checkEndpointURL(u string) error {
	if len(u) > EndpointURLLenMax {
		return fmt.Errorf("%w: url is over %d bytes", errs.ErrInvalidArgument, EndpointURLLenMax)
	}
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fmt.Errorf("%w: url %q must start with http:// or https://", errs.ErrInvalidArgument, u)
	}
	if _, err := config.CheckEndpoint(u); err != nil {
		return fmt.Errorf("%w: url %v", errs.ErrInvalidArgument, err)
	}
	return nil
}

// endpointEdit is the store write that makes op's change to the overlay
// recs puts on base, with the engine's refusals: errs.ErrNotFound for an
// unknown pool or endpoint, errs.ErrAlreadyExists for an endpoint in its
// pool, errs.ErrInvalidArgument for a full pool.
func endpointEdit(base []config.Backend, recs []endpointRec, op engine.EndpointOp) (store.Op, error) {
	i := slices.IndexFunc(base, func(b config.Backend) bool { return b.Name == op.Pool })
	if i < 0 {
		return store.Op{}, fmt.Errorf("%w: no backend pool %q (pools are the [[backends]] sluiced started with)", errs.ErrNotFound, op.Pool)
	}
	order, draining := effectiveEndpoints(base, recs)
	k := epKey{op.Pool, op.URL}
	_, present := draining[k]
	inFile := slices.Contains(base[i].Endpoints, op.URL)
	key := endpointKey(op.Pool, op.URL)
	put := func(state string) (store.Op, error) {
		b, err := json.Marshal(endpointRec{op.Pool, op.URL, state})
		if err != nil {
			return store.Op{}, fmt.Errorf("%w: %v", errs.ErrInternal, err)
		}
		return store.Op{Key: key, Value: b}, nil
	}
	del := store.Op{Key: key, Delete: true}
	if op.Action != engine.EndpointAdd && !present {
		return store.Op{}, fmt.Errorf("%w: %s is not in pool %s", errs.ErrNotFound, op.URL, op.Pool)
	}
	switch op.Action {
	case engine.EndpointAdd:
		if present {
			return store.Op{}, fmt.Errorf("%w: %s is in pool %s", errs.ErrAlreadyExists, op.URL, op.Pool)
		}
		n := 0
		for _, x := range order {
			if x.pool == op.Pool {
				n++
			}
		}
		if n >= config.BackendEndpointsMax {
			return store.Op{}, fmt.Errorf("%w: pool %s has %d endpoints, the most it takes", errs.ErrInvalidArgument, op.Pool, n)
		}
		if inFile {
			return del, nil // back to the file's
		}
		return put(endpointAdded)
	case engine.EndpointDrain:
		return put(endpointDrained)
	case engine.EndpointUndrain:
		if inFile {
			return del, nil
		}
		return put(endpointAdded)
	case engine.EndpointRemove:
		if inFile {
			return put(endpointRemoved)
		}
		return del, nil
	}
	return store.Op{}, fmt.Errorf("%w: action %q: want add, drain, undrain or remove", errs.ErrInvalidArgument, op.Action)
}

// checkEndpointOp refuses what no pool could take, before anything is
// read or written.
func checkEndpointOp(op engine.EndpointOp) error {
	if op.URL == "" {
		return fmt.Errorf("%w: url is required", errs.ErrInvalidArgument)
	}
	if op.Action == engine.EndpointAdd {
		return checkEndpointURL(op.URL)
	}
	return nil
}

// servedEndpointsLocked is what the engine serves: the pools it started
// with, then every change made to it since. s.mu is held.
func (s *state) servedEndpointsLocked() map[epKey]bool {
	if s.eps == nil {
		_, s.eps = effectiveEndpoints(s.eff.Backends, nil)
	}
	return s.eps
}

// noteEndpointLocked records a change the engine took. s.mu is held.
func (s *state) noteEndpointLocked(op engine.EndpointOp) {
	eps, k := s.servedEndpointsLocked(), epKey{op.Pool, op.URL}
	switch op.Action {
	case engine.EndpointAdd, engine.EndpointUndrain:
		eps[k] = false
	case engine.EndpointDrain:
		eps[k] = true
	case engine.EndpointRemove:
		delete(eps, k)
	}
}

// syncEndpointsLocked makes the engine serve the endpoints st holds:
// removals first (they make room in a full pool), then additions, then
// draining. A change the engine refuses now (not running yet, say) is
// logged and tried again at the next sync (a reload, a fleet resync).
// Returns whether the engine changed. s.mu is held.
func (s *state) syncEndpointsLocked(st store.Store) bool {
	recs, err := loadEndpointRecs(st)
	if err != nil {
		s.log.Error("stored endpoint changes not all read", "err", err)
	}
	order, want := effectiveEndpoints(s.eff.Backends, recs)
	have := s.servedEndpointsLocked()
	changed := false
	do := func(k epKey, a engine.EndpointAction) bool {
		op := engine.EndpointOp{Pool: k.pool, URL: k.url, Action: a}
		err := s.eng.BackendEndpoint(op)
		switch {
		case err == nil:
			changed = true
		case a == engine.EndpointRemove && errors.Is(err, errs.ErrNotFound),
			a == engine.EndpointAdd && errors.Is(err, errs.ErrAlreadyExists):
			// The engine had it so already.
		default:
			lvl := slog.LevelError
			if errors.Is(err, errs.ErrNotRunning) || errors.Is(err, errs.ErrShuttingDown) {
				lvl = slog.LevelDebug
			}
			s.log.Log(context.Background(), lvl, "stored endpoint change not served; retried at the next sync",
				"pool", k.pool, "url", k.url, "action", a, "err", err)
			return false
		}
		s.noteEndpointLocked(op)
		return true
	}
	var gone []epKey
	for k := range have {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.SortFunc(gone, func(a, b epKey) int { return strings.Compare(a.pool+"\x00"+a.url, b.pool+"\x00"+b.url) })
	for _, k := range gone {
		do(k, engine.EndpointRemove)
	}
	for _, k := range order {
		if _, ok := have[k]; !ok && !do(k, engine.EndpointAdd) {
			continue
		}
		if have[k] != want[k] {
			a := engine.EndpointUndrain
			if want[k] {
				a = engine.EndpointDrain
			}
			do(k, a)
		}
	}
	return changed
}

// endpointOp makes one change to a pool's endpoints: in the engine, then
// in the store (one host); in fleet mode in the shared store only, from
// where every appliance's fleet loop serves it.
func (s *state) endpointOp(ctx context.Context, op engine.EndpointOp) error {
	if err := checkEndpointOp(op); err != nil {
		return err
	}
	if s.link != nil {
		return s.fleetEndpointOp(ctx, op)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	recs, err := loadEndpointRecs(s.st)
	if err != nil {
		return err
	}
	w, err := endpointEdit(s.eff.Backends, recs, op)
	if err != nil {
		return err
	}
	if err := s.eng.BackendEndpoint(op); err != nil {
		return err
	}
	s.noteEndpointLocked(op)
	if w.Delete {
		err = s.st.Delete(w.Key)
	} else {
		err = s.st.Put(w.Key, w.Value)
	}
	if err != nil {
		// Not saved, so not kept: the engine goes back to what the store holds.
		s.syncEndpointsLocked(s.st)
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	return nil
}

// fleetEndpointOp stores the change in the shared state, composed and
// checked against this appliance's pools. An appliance whose file lacks
// the pool leaves the record alone.
func (s *state) fleetEndpointOp(ctx context.Context, op engine.EndpointOp) error {
	return s.fleetChange(ctx, func(v *store.View, _ *overrides) ([]store.Op, error) {
		recs, err := loadEndpointRecs(v)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		base := s.eff.Backends
		s.mu.Unlock()
		w, err := endpointEdit(base, recs, op)
		if err != nil {
			return nil, err
		}
		return []store.Op{w}, nil
	})
}

// restoreEndpoints makes the engine, just started, serve the stored
// endpoint changes.
func (d *Daemon) restoreEndpoints() {
	s := d.state
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncEndpointsLocked(s.st)
}

// getBackends answers the backends part of the engine's status: every
// pool with its endpoints and counters (no pools without [[backends]]).
func (d *Daemon) getBackends(w http.ResponseWriter, _ *http.Request) {
	st, err := d.eng.Status()
	if err != nil {
		writeErr(w, err)
		return
	}
	doc := engine.BackendsStatus{}
	if st.Frontdoor != nil && st.Frontdoor.Backends != nil {
		doc = *st.Frontdoor.Backends
	}
	doc.Pools = nonNil(doc.Pools)
	for i := range doc.Pools {
		doc.Pools[i].Endpoints = nonNil(doc.Pools[i].Endpoints)
	}
	if doc.Models == nil {
		doc.Models = map[string]engine.BackendTiming{}
	}
	writeJSON(w, http.StatusOK, doc)
}

func (d *Daemon) postEndpoint(w http.ResponseWriter, r *http.Request) {
	d.endpointWrite(w, r, engine.EndpointAdd)
}

func (d *Daemon) drainEndpoint(w http.ResponseWriter, r *http.Request) {
	d.endpointWrite(w, r, engine.EndpointDrain)
}

func (d *Daemon) undrainEndpoint(w http.ResponseWriter, r *http.Request) {
	d.endpointWrite(w, r, engine.EndpointUndrain)
}

// endpointWrite serves the calls whose body names the endpoint.
func (d *Daemon) endpointWrite(w http.ResponseWriter, r *http.Request, a engine.EndpointAction) {
	op := engine.EndpointOp{Pool: r.PathValue("pool"), Action: a}
	var b api.EndpointBody
	if err := decode(w, r, &b); err != nil {
		d.audit(r, "endpoints", string(a), op.Pool, err)
		return
	}
	op.URL = b.URL
	err := d.state.endpointOp(r.Context(), op)
	d.audit(r, "endpoints", string(a), op.Pool+" "+op.URL, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	code := http.StatusOK
	if a == engine.EndpointAdd {
		code = http.StatusCreated
	}
	writeJSON(w, code, op)
}

// deleteEndpoint removes the endpoint named by the url query parameter.
func (d *Daemon) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	op := engine.EndpointOp{Pool: r.PathValue("pool"), URL: r.URL.Query().Get("url"), Action: engine.EndpointRemove}
	err := d.state.endpointOp(r.Context(), op)
	d.audit(r, "endpoints", string(op.Action), op.Pool+" "+op.URL, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
