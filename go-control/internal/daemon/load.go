package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
)

// errNoLoad: the engine keeps no load rings (the fake engine).
var errNoLoad = fmt.Errorf("%w: this engine keeps no token load", errs.ErrUnsupported)

// loadOf reads the load of q from the engine and lays it out; by shard,
// shards (nil: read from a stats call) names every shard in table order.
func (d *Daemon) loadOf(q heatmap.Query, shards []string) (heatmap.Doc, error) {
	src, ok := d.eng.(engine.LoadSource)
	if !ok {
		return heatmap.Doc{}, errNoLoad
	}
	rows, err := src.Load(q.From, q.To, q.By)
	if err != nil {
		return heatmap.Doc{}, err
	}
	fixed := shards
	if q.By == engine.LoadByShard && fixed == nil {
		st, err := d.eng.Stats()
		if err != nil {
			return heatmap.Doc{}, err
		}
		for _, s := range st.Shards {
			fixed = append(fixed, s.Name)
		}
	}
	return heatmap.Build(rows, q, fixed, applianceName()), nil
}

// getLoad answers GET /v1/load: tokens, requests, errors and queue depth
// per shard, model or tenant over time, from the engine's rings.
func (d *Daemon) getLoad(w http.ResponseWriter, r *http.Request) {
	q, err := heatmap.ParseQuery(r.URL.Query(), time.Now())
	if errors.Is(err, heatmap.ErrOutOfRange) {
		writeAPIError(w, http.StatusUnprocessableEntity, api.CodeOutOfRange, err.Error())
		return
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	doc, err := d.loadOf(q, nil)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, doc)
}

// LoadDoc is the load of q on this appliance (what the fleet shares).
func (d *Daemon) LoadDoc(q heatmap.Query) (heatmap.Doc, error) { return d.loadOf(q, nil) }

// errNoFleet: GET /v1/load/fleet on one host (404: there is no fleet).
var errNoFleet = fmt.Errorf("%w: not in fleet mode (control.store = \"nats\"): this appliance's load is GET /v1/load", errs.ErrNotFound)

// FleetLoadDoc is the body of GET /v1/load/fleet.
type FleetLoadDoc struct {
	Appliance  string        `json:"appliance"` // the one answering
	WindowS    int           `json:"window_s"`
	Appliances []heatmap.Doc `json:"appliances"`
}

// getFleetLoad answers GET /v1/load/fleet: the last FleetWindowS seconds
// by shard of every appliance heard on NATS within FleetStale.
func (d *Daemon) getFleetLoad(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeErr(w, fmt.Errorf("%w: GET /v1/load/fleet takes no parameters", errs.ErrInvalidArgument))
		return
	}
	if d.opts.LoadFleet == nil {
		writeErr(w, errNoFleet)
		return
	}
	writeJSON(w, http.StatusOK, FleetLoadDoc{Appliance: applianceName(), WindowS: heatmap.FleetWindowS, Appliances: d.opts.LoadFleet.Docs()})
}

func applianceName() string {
	h, err := os.Hostname()
	if err != nil {
		return "sluiced"
	}
	return h
}
