package daemon

import (
	"fmt"
	"net/http"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// modelMeta serves GET /v1/models/{name}: every loaded version of the model
// with its inputs and outputs (symbolic dimensions shown), platform,
// aliases, adapters and the file's metadata.
func (d *Daemon) modelMeta(w http.ResponseWriter, r *http.Request) {
	md, ok := d.eng.(engine.ModelDescriber)
	if !ok {
		writeErr(w, fmt.Errorf("%w: this engine cannot describe models", errs.ErrUnsupported))
		return
	}
	doc, err := md.ModelMeta(r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(doc, '\n'))
}
