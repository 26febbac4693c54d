package faults

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// clean is a small history with nothing wrong: one acknowledged route
// change served everywhere in 30 ms, one refused, one unknown that
// landed and is served everywhere, a NATS node killed and back, and
// traffic answered throughout.
func clean() *History {
	h := &History{Seed: 1, Start: at(0), FaultEnd: at(10_000), Bound: time.Second, FailoverBound: 10 * time.Second,
		Nodes: []string{"nats:n0", "nats:n1", "nats:n2"}, Apps: []string{"a", "b", "c"}}
	h.Writes = []Write{
		{ID: "f1-1", Kind: "routes", Appliance: "a", Start: at(900), End: at(1000), Status: 200, Outcome: OutcomeOK},
		{ID: "f1-2", Kind: "tenants", Appliance: "b", Start: at(1100), End: at(1200), Status: 409, Code: "conflict", Outcome: OutcomeRefused},
		{ID: "f1-3", Kind: "routes", Appliance: "c", Start: at(2000), End: at(4000), Status: 504, Code: "outcome_unknown", Outcome: OutcomeUnknown},
	}
	h.Events = []Event{
		{T: at(5000), Op: "kill", Target: "nats:n1", Leads: []string{"sluice_models"}},
		{T: at(7000), Op: "start", Target: "nats:n1"},
	}
	for _, app := range h.Apps {
		h.Obs = append(h.Obs,
			Obs{T: at(1010), Appliance: app, Served: map[string]uint64{"sluice_routes": 4}},
			Obs{T: at(1040), Appliance: app, Served: map[string]uint64{"sluice_routes": 5}, ServedAt: map[string]time.Time{"sluice_routes": at(1030)}},
			Obs{T: at(6000), Appliance: app, Served: map[string]uint64{"sluice_routes": 6}})
		for s := 0; s < 10; s++ {
			h.Segments = append(h.Segments, Segment{Appliance: app, Start: at(1000 * s), End: at(1000*s + 1000), Sent: 100, OK: 100})
		}
		h.Finals = append(h.Finals, Final{Appliance: app, Served: map[string]uint64{"sluice_routes": 6},
			Digests: map[string]string{"sluice_routes": "d6"}, Routes: []byte(`[{"name":"x","shard":"s"}]`)})
	}
	h.Store = StoreState{
		Msgs:     []StoreMsg{{Bucket: "sluice_routes", Seq: 5, Key: "routes", ChangeID: "f1-1"}, {Bucket: "sluice_routes", Seq: 6, Key: "routes", ChangeID: "f1-3"}},
		Last:     map[string]uint64{"sluice_routes": 6},
		Digests:  map[string]string{"sluice_routes": "d6"},
		Complete: map[string]bool{"sluice_routes": true},
		Routes:   []byte(`[ {"shard":"s", "name":"x"} ]`),
	}
	return h
}

func violations(t *testing.T, h *History) []string {
	t.Helper()
	return Check(h).Violations
}

func expectOne(t *testing.T, h *History, want string) {
	t.Helper()
	v := violations(t, h)
	if len(v) != 1 || !strings.Contains(v[0], want) {
		t.Fatalf("want one violation with %q, got %q", want, v)
	}
}

func TestCheckCleanHistory(t *testing.T) {
	rep := Check(clean())
	if !rep.OK() {
		t.Fatalf("violations in a clean history: %q", rep.Violations)
	}
	text := strings.Join(rep.Lines, "\n")
	for _, want := range []string{"writes routes   ok    1  refused    0  unknown    1 (landed 1)", "n=1 p50=30ms", "30 segments"} {
		if !strings.Contains(text, want) {
			t.Errorf("statistics lack %q:\n%s", want, text)
		}
	}
}

func TestCheckFindsWhatIsWrong(t *testing.T) {
	h := clean()
	h.Store.Msgs = h.Store.Msgs[1:]
	expectOne(t, h, "answered 200 but is not in the store")

	h = clean()
	h.Store.Msgs = append(h.Store.Msgs, StoreMsg{Bucket: "sluice_tenants", Seq: 1, Key: "tenants", ChangeID: "f1-2"})
	expectOne(t, h, "(not applied) but the store has it")

	h = clean()
	h.Store.Msgs = append(h.Store.Msgs, StoreMsg{Bucket: "sluice_routes", Seq: 3, Key: "routes", ChangeID: "f1-1"})
	expectOne(t, h, "stored 2 times")

	// Served by c only 1.5 s after the answer, a majority up.
	h = clean()
	for i := range h.Obs {
		if h.Obs[i].Appliance == "c" && h.Obs[i].Served["sluice_routes"] == 5 {
			h.Obs[i].T, h.Obs[i].ServedAt = at(2500), nil
		}
	}
	expectOne(t, h, "served everywhere 1.5s after its answer")
	// The same while c was stopped: c does not count for the bound.
	h.Events = append(h.Events, Event{T: at(990), Op: "stop", Target: "app:c"}, Event{T: at(2400), Op: "cont", Target: "app:c"})
	if v := violations(t, h); len(v) != 0 {
		t.Fatalf("an appliance that was down held to the bound: %q", v)
	}
	// Or while the routes leader failed right after the answer: the
	// failover bound holds instead.
	h = clean()
	for i := range h.Obs {
		if h.Obs[i].Appliance == "c" && h.Obs[i].Served["sluice_routes"] == 5 {
			h.Obs[i].T, h.Obs[i].ServedAt = at(2500), nil
		}
	}
	h.Events = append(h.Events, Event{T: at(1010), Op: "stop", Target: "nats:n0", Leads: []string{"sluice_routes"}},
		Event{T: at(3000), Op: "cont", Target: "nats:n0"})
	if v := violations(t, h); len(v) != 0 {
		t.Fatalf("failover: %q", v)
	}
	h.FailoverBound = time.Second
	expectOne(t, h, "its stream leader failing meanwhile")

	h = clean()
	h.Finals[1].Digests["sluice_routes"] = "other"
	expectOne(t, h, "appliance b serves sluice_routes at 6 (digest other)")

	h = clean()
	h.Finals[2].Routes = []byte(`[]`)
	expectOne(t, h, "appliance c reads back routes")

	h = clean()
	h.Segments[3].Timeouts, h.Segments[3].OK = 2, 98
	expectOne(t, h, "data plane of a")
	// Not when a was stopped then.
	h.Events = append(h.Events, Event{T: at(2900), Op: "stop", Target: "app:a"}, Event{T: at(4200), Op: "cont", Target: "app:a"})
	if v := violations(t, h); len(v) != 0 {
		t.Fatalf("a stopped appliance's data plane counted: %q", v)
	}

	h = clean()
	h.Writes[2].Status = 500
	expectOne(t, h, "outside the fleet write contract")

	h = clean()
	h.Events = append(h.Events, Event{T: at(8000), Op: "died", Target: "app:b"})
	if v := violations(t, h); len(v) == 0 || !strings.Contains(strings.Join(v, " "), "died on its own") {
		t.Fatalf("a death: %q", v)
	}

	h = clean()
	h.Store.Complete["sluice_routes"] = false
	expectOne(t, h, "history incomplete")
}

func TestTimeline(t *testing.T) {
	tl := buildTimeline([]Event{
		{T: at(100), Op: "kill", Target: "nats:n0"}, {T: at(200), Op: "kill", Target: "nats:n1"},
		{T: at(300), Op: "start", Target: "nats:n0"}, {T: at(400), Op: "start", Target: "nats:n1"},
		{T: at(500), Op: "kill", Target: "app:a"}, {T: at(600), Op: "start", Target: "app:a"}, {T: at(700), Op: "serving", Target: "app:a"},
	}, at(1000))
	nodes := []string{"nats:n0", "nats:n1", "nats:n2"}
	if tl.majorityThroughout(nodes, at(150), at(250)) || !tl.majorityThroughout(nodes, at(300), at(1000)) || !tl.majorityThroughout(nodes, at(0), at(199)) {
		t.Fatal("majority")
	}
	if tl.upThroughout("app:a", at(650), at(660)) || !tl.upThroughout("app:a", at(700), at(900)) {
		t.Fatal("an appliance is down from kill to serving")
	}
}
