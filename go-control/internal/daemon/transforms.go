package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// Schema transforms (docs/transforms.md): the engine checks, compiles and
// swaps them; the daemon keeps each module in the store under
// prefixTransform (in fleet mode: the shared state's "control" bucket) and
// makes the engine serve what the store holds: at start once the
// registry's schemas have reached the engine, and at every reload and
// fleet resync.
const (
	prefixTransform = "transform."
	// TransformBytesMax is the largest module a PUT takes (the engine's
	// default transforms.module_bytes_max).
	TransformBytesMax = 8 << 20
	// TransformRestoreWait bounds the wait, at start, for the first schema
	// push before stored transforms are put back.
	TransformRestoreWait = 30 * time.Second
)

// FleetTransformJSONMax bounds a stored transform record in fleet mode:
// one JetStream KV value, under nats-server's default max_payload (1 MiB).
// The module is base64 in it, so modules up to about 750 KiB fit.
const FleetTransformJSONMax = 1000 << 10

// transformRec is the stored record: the pair and the module.
type transformRec struct {
	Subject string `json:"subject"`
	From    int    `json:"from"`
	To      int    `json:"to"`
	Wasm    []byte `json:"wasm"` // base64 in JSON
}

// servedTransform is what this appliance's engine serves for a store key.
type servedTransform struct {
	subject  string
	from, to int
	digest   [32]byte
}

func transformKey(subject string, from, to int) string {
	return prefixTransform + enc(subject, strconv.Itoa(from), strconv.Itoa(to))
}

// syncTransformsLocked makes the engine serve the transforms st holds:
// new or changed modules are put, ones gone are removed. A module the
// engine refuses now (its schemas not pushed yet, say) is logged and tried
// again at the next sync (a reload, a fleet resync). Returns whether the
// engine changed. s.mu is held.
func (s *state) syncTransformsLocked(st store.Store) bool {
	es, err := st.List(prefixTransform)
	if err != nil {
		s.log.Error("stored transforms not read", "err", err)
		return false
	}
	if s.xf == nil {
		s.xf = map[string]servedTransform{}
	}
	changed := false
	want := map[string]bool{}
	for _, e := range es {
		var rec transformRec
		if err := json.Unmarshal(e.Value, &rec); err != nil {
			s.log.Error("stored transform unreadable", "key", e.Key, "err", err)
			continue
		}
		want[e.Key] = true
		d := sha256.Sum256(rec.Wasm)
		if cur, ok := s.xf[e.Key]; ok && cur.digest == d {
			continue
		}
		if _, err := s.eng.PutTransform(rec.Subject, rec.From, rec.To, rec.Wasm); err != nil {
			s.log.Error("stored transform refused by the engine; retried at the next sync", "subject", rec.Subject,
				"from", rec.From, "to", rec.To, "err", err)
			continue
		}
		s.xf[e.Key] = servedTransform{rec.Subject, rec.From, rec.To, d}
		changed = true
	}
	for k, cur := range s.xf {
		if want[k] {
			continue
		}
		if err := s.eng.RemoveTransform(cur.subject, cur.from, cur.to); err != nil && !errors.Is(err, errs.ErrNotFound) {
			s.log.Error("transform gone from the store not removed from the engine", "subject", cur.subject,
				"from", cur.from, "to", cur.to, "err", err)
			continue
		}
		delete(s.xf, k)
		changed = true
	}
	return changed
}

func (s *state) putTransform(ctx context.Context, subject string, from, to int, wasm []byte) (uint64, error) {
	if s.link != nil {
		return s.fleetPutTransform(ctx, subject, from, to, wasm)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := transformKey(subject, from, to)
	epoch, err := s.eng.PutTransform(subject, from, to, wasm)
	if err != nil {
		return 0, err
	}
	if s.xf == nil {
		s.xf = map[string]servedTransform{}
	}
	prev, had := s.xf[key]
	s.xf[key] = servedTransform{subject, from, to, sha256.Sum256(wasm)}
	if err := s.putJSON(key, transformRec{subject, from, to, wasm}); err != nil {
		// Not saved, so not kept: the engine goes back to what the store has.
		if had {
			s.xf[key] = servedTransform{prev.subject, prev.from, prev.to, [32]byte{}}
		}
		s.syncTransformsLocked(s.st)
		return 0, fmt.Errorf("not saved, so not applied: %w", err)
	}
	return epoch, nil
}

func (s *state) removeTransform(ctx context.Context, subject string, from, to int) error {
	if s.link != nil {
		return s.fleetRemoveTransform(ctx, subject, from, to)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.eng.RemoveTransform(subject, from, to); err != nil {
		return err
	}
	key := transformKey(subject, from, to)
	delete(s.xf, key)
	if err := s.st.Delete(key); err != nil {
		s.syncTransformsLocked(s.st)
		return fmt.Errorf("not saved, so not applied: %w", err)
	}
	return nil
}

// fleetPutTransform: the module is checked and served here first (one the
// engine refuses is never stored), then stored in the shared state; every
// other appliance's fleet loop puts it into its engine. If the store did
// not take it, this appliance goes back to what the store holds.
func (s *state) fleetPutTransform(ctx context.Context, subject string, from, to int, wasm []byte) (uint64, error) {
	key := transformKey(subject, from, to)
	b, err := json.Marshal(transformRec{subject, from, to, wasm})
	if err != nil {
		return 0, fmt.Errorf("%w: %v", errs.ErrInternal, err)
	}
	if len(b) > FleetTransformJSONMax {
		return 0, fmt.Errorf("%w: module of %d bytes: in fleet mode a stored transform is one NATS value of at most %d bytes (base64: modules up to about %d KiB)",
			errs.ErrInvalidArgument, len(wasm), FleetTransformJSONMax, FleetTransformJSONMax*3/4>>10)
	}
	s.mu.Lock()
	epoch, err := s.eng.PutTransform(subject, from, to, wasm)
	if err == nil {
		if s.xf == nil {
			s.xf = map[string]servedTransform{}
		}
		s.xf[key] = servedTransform{subject, from, to, sha256.Sum256(wasm)}
	}
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	err = s.fleetChange(ctx, func(_ *store.View, _ *overrides) ([]store.Op, error) {
		return []store.Op{{Key: key, Value: b}}, nil
	})
	if err != nil {
		s.mu.Lock()
		delete(s.xf, key) // re-put from the store if it holds one
		s.syncTransformsLocked(s.st)
		s.mu.Unlock()
		return 0, err
	}
	return epoch, nil
}

func (s *state) fleetRemoveTransform(ctx context.Context, subject string, from, to int) error {
	key := transformKey(subject, from, to)
	return s.fleetChange(ctx, func(v *store.View, _ *overrides) ([]store.Op, error) {
		if _, err := v.Get(key); err != nil {
			if errors.Is(err, errs.ErrNotFound) {
				return nil, fmt.Errorf("%w: transform %s %d -> %d", errs.ErrNotFound, subject, from, to)
			}
			return nil, err
		}
		return []store.Op{{Key: key, Delete: true}}, nil
	})
}

// restoreTransforms puts the stored transforms into the engine at start,
// once the registry's schemas have reached it (a transform needs both
// versions registered).
func (d *Daemon) restoreTransforms() {
	if es, err := d.state.st.List(prefixTransform); err != nil || len(es) == 0 {
		return
	}
	if !d.schemas.waitPushed(TransformRestoreWait) {
		d.state.log.Warn("schemas not pushed yet; putting stored transforms back anyway")
	}
	d.state.mu.Lock()
	defer d.state.mu.Unlock()
	d.state.syncTransformsLocked(d.state.st)
}

// transformPair reads {subject}/{from}/{to} from the path.
func transformPair(r *http.Request) (string, int, int, error) {
	subject := r.PathValue("subject")
	from, e1 := strconv.Atoi(r.PathValue("from"))
	to, e2 := strconv.Atoi(r.PathValue("to"))
	if subject == "" || e1 != nil || e2 != nil || from < 1 || to < 1 {
		return "", 0, 0, fmt.Errorf("%w: want /v1/transforms/{subject}/{from}/{to} with versions of at least 1", errs.ErrInvalidArgument)
	}
	return subject, from, to, nil
}

func (d *Daemon) getTransforms(w http.ResponseWriter, _ *http.Request) {
	ts, err := d.eng.Transforms()
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, nonNil(ts))
}

func (d *Daemon) putTransform(w http.ResponseWriter, r *http.Request) {
	subject, from, to, err := transformPair(r)
	what := fmt.Sprintf("%s %d -> %d", subject, from, to)
	if err != nil {
		d.audit(r, "transforms", "put", what, err)
		writeErr(w, err)
		return
	}
	wasm, err := io.ReadAll(http.MaxBytesReader(w, r.Body, TransformBytesMax))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: module is over %d bytes", errs.ErrInvalidArgument, TransformBytesMax)
			d.audit(r, "transforms", "put", what, err)
			writeAPIError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, err.Error())
			return
		}
		err = fmt.Errorf("%w: reading body: %w", errs.ErrInvalidArgument, err)
		d.audit(r, "transforms", "put", what, err)
		writeErr(w, err)
		return
	}
	epoch, err := d.state.putTransform(r.Context(), subject, from, to, wasm)
	d.audit(r, "transforms", "put", what, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.TransformPut{Subject: subject, From: from, To: to, Epoch: epoch, Bytes: len(wasm)})
}

func (d *Daemon) deleteTransform(w http.ResponseWriter, r *http.Request) {
	subject, from, to, err := transformPair(r)
	what := fmt.Sprintf("%s %d -> %d", subject, from, to)
	if err == nil {
		err = d.state.removeTransform(r.Context(), subject, from, to)
	}
	d.audit(r, "transforms", "remove", what, err)
	if err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
