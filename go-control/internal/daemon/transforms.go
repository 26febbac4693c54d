package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Schema transforms (docs/transforms.md): the engine checks, compiles and
// swaps them; the daemon keeps each module in the store under
// prefixTransform so an appliance restarted gets them back once the
// registry's schemas have reached the engine.
const (
	prefixTransform = "transform."
	// TransformBytesMax is the largest module a PUT takes (the engine's
	// default transforms.module_bytes_max).
	TransformBytesMax = 8 << 20
	// TransformRestoreWait bounds the wait, at start, for the first schema
	// push before stored transforms are put back.
	TransformRestoreWait = 30 * time.Second
)

// errFleetTransforms: fleet distribution of transforms is not built yet.
var errFleetTransforms = fmt.Errorf("%w: schema transforms are per appliance in this build (fleet mode does not distribute them over NATS yet)", errs.ErrUnsupported)

// transformRec is the stored record: the pair and the module.
type transformRec struct {
	Subject string `json:"subject"`
	From    int    `json:"from"`
	To      int    `json:"to"`
	Wasm    []byte `json:"wasm"` // base64 in JSON
}

func transformKey(subject string, from, to int) string {
	return prefixTransform + enc(subject, strconv.Itoa(from), strconv.Itoa(to))
}

func (s *state) putTransform(_ context.Context, subject string, from, to int, wasm []byte) (uint64, error) {
	if s.link != nil {
		return 0, errFleetTransforms
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := transformKey(subject, from, to)
	old, oldErr := s.st.Get(key)
	epoch, err := s.eng.PutTransform(subject, from, to, wasm)
	if err != nil {
		return 0, err
	}
	if err := s.putJSON(key, transformRec{subject, from, to, wasm}); err != nil {
		// Not saved, so not kept: the engine goes back to what the store has.
		var e2 error
		var rec transformRec
		if oldErr == nil && json.Unmarshal(old, &rec) == nil {
			_, e2 = s.eng.PutTransform(subject, from, to, rec.Wasm)
		} else {
			e2 = s.eng.RemoveTransform(subject, from, to)
		}
		if e2 != nil {
			s.log.Error("could not set the transform back after a store failure", "err", e2)
		}
		return 0, fmt.Errorf("not saved, so not applied: %w", err)
	}
	return epoch, nil
}

func (s *state) removeTransform(_ context.Context, subject string, from, to int) error {
	if s.link != nil {
		return errFleetTransforms
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.eng.RemoveTransform(subject, from, to); err != nil {
		return err
	}
	return s.st.Delete(transformKey(subject, from, to))
}

// restoreTransforms puts the stored transforms back into the engine once
// the registry's schemas have reached it (a transform needs both versions
// registered). Failures are logged: the appliance serves without them.
func (d *Daemon) restoreTransforms() {
	if d.state.link != nil {
		return
	}
	es, err := d.state.st.List(prefixTransform)
	if err != nil || len(es) == 0 {
		if err != nil {
			d.state.log.Error("stored transforms not read", "err", err)
		}
		return
	}
	if !d.schemas.waitPushed(TransformRestoreWait) {
		d.state.log.Warn("schemas not pushed yet; putting stored transforms back anyway")
	}
	for _, e := range es {
		var rec transformRec
		if err := json.Unmarshal(e.Value, &rec); err != nil {
			d.state.log.Error("stored transform unreadable", "key", e.Key, "err", err)
			continue
		}
		if _, err := d.eng.PutTransform(rec.Subject, rec.From, rec.To, rec.Wasm); err != nil {
			d.state.log.Error("stored transform refused by the engine", "subject", rec.Subject,
				"from", rec.From, "to", rec.To, "err", err)
		}
	}
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
