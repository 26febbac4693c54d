package enginetest

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// Every key of the fixture (written as stats.rs writes the status) has a
// field in engine.BackendsStatus, and the fields read it.
func TestBackendsJSONDecodesStrictly(t *testing.T) {
	dec := json.NewDecoder(bytes.NewReader([]byte(BackendsJSON)))
	dec.DisallowUnknownFields()
	var b engine.BackendsStatus
	if err := dec.Decode(&b); err != nil {
		t.Fatal(err)
	}
	if len(b.Pools) != 2 || b.Pools[0].Protocol != "openai" || b.Pools[0].MaxConcurrency != 4 || b.Pools[0].Errors["status_5xx"] != 4 ||
		b.Pools[0].TTFT.P50US != 35000 || len(b.Pools[0].Endpoints) != 3 || !b.Pools[0].Endpoints[1].Ejected ||
		b.Models["gemma-3-270m"].ITL.P99US != 30000 {
		t.Fatalf("decoded %+v", b)
	}
}

func TestSetFrontdoor(t *testing.T) {
	f := newFake(t)
	st, err := f.Status()
	if err != nil || st.Frontdoor != nil {
		t.Fatalf("default status: %+v, %v", st.Frontdoor, err)
	}
	fd := &engine.FrontdoorStatus{HTTP: "127.0.0.1:8000", Backends: Backends()}
	f.SetFrontdoor(fd)
	fd.Backends.Pools[0].Name = "changed after"
	st, _ = f.Status()
	if st.Frontdoor == nil || st.Frontdoor.Backends.Pools[0].Name != "llama" {
		t.Fatalf("status after SetFrontdoor: %+v", st.Frontdoor)
	}
}
