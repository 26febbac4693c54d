package faults

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Outcomes of a write, as the client was told.
const (
	OutcomeOK      = "ok"      // 2xx: stored, served everywhere
	OutcomeRefused = "refused" // 4xx, 409, 503, or never reached the appliance: not applied
	OutcomeUnknown = "unknown" // 504, or sent and not answered: applied everywhere or nowhere
)

// Write is one admin API write and what it was answered.
type Write struct {
	ID        string    `json:"id"` // the Idempotency-Key, kept with the change in the store
	Kind      string    `json:"kind"`
	Appliance string    `json:"appliance"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Status    int       `json:"status"`
	Code      string    `json:"code,omitempty"` // the error code of the body
	Outcome   string    `json:"outcome"`
	Detail    string    `json:"detail,omitempty"`
}

// Event is a fault or its repair.
type Event struct {
	T      time.Time `json:"t"`
	Op     string    `json:"op"`     // kill, start, stop, cont
	Target string    `json:"target"` // nats:n0, app:a
	Why    string    `json:"why,omitempty"`
	// Leads lists the buckets whose stream the node led when it was
	// killed or stopped: their acknowledged writes wait for a new leader.
	Leads []string `json:"leads,omitempty"`
}

// Obs is what an appliance said it serves, polled.
type Obs struct {
	T         time.Time         `json:"t"`
	Appliance string            `json:"appliance"`
	Served    map[string]uint64 `json:"served"`
	// ServedAt is when the appliance began serving Served (by its own
	// account: served_ms_ago), so the lag does not depend on the polling.
	ServedAt map[string]time.Time `json:"served_at"`
	Mirror   map[string]uint64    `json:"mirror"` // what its mirrors hold
}

// Segment is one run of the data-plane client against one appliance.
type Segment struct {
	Appliance string           `json:"appliance"`
	Start     time.Time        `json:"start"`
	End       time.Time        `json:"end"`
	Sent      uint64           `json:"sent"`
	OK        uint64           `json:"ok"`
	Timeouts  uint64           `json:"timeouts"`
	Malformed uint64           `json:"malformed"`
	IOErrors  uint64           `json:"io_errors"`
	Errors    map[string]int64 `json:"errors,omitempty"`
	Failed    string           `json:"failed,omitempty"` // the client could not run
}

// StoreMsg is one message of a bucket's stream, read at the end.
type StoreMsg struct {
	Bucket   string `json:"bucket"`
	Seq      uint64 `json:"seq"`
	Key      string `json:"key"`
	ChangeID string `json:"change_id,omitempty"`
	Deleted  bool   `json:"deleted,omitempty"`
}

// Final is an appliance's state after the run, once quiet.
type Final struct {
	Appliance string            `json:"appliance"`
	Served    map[string]uint64 `json:"served"`
	Digests   map[string]string `json:"digests"`
	Err       string            `json:"err,omitempty"`
	// What its admin API reads back, to compare with the store.
	Routes   json.RawMessage `json:"routes,omitempty"`
	Subjects []string        `json:"subjects,omitempty"`
	Stats    map[string]uint64
}

// StoreState is the store after the run.
type StoreState struct {
	Msgs     []StoreMsg        `json:"msgs"`
	Last     map[string]uint64 `json:"last"`     // by bucket
	Digests  map[string]string `json:"digests"`  // of the latest value of every live key
	Complete map[string]bool   `json:"complete"` // every sequence 1..last is present
	Routes   json.RawMessage   `json:"routes,omitempty"`
	Subjects []string          `json:"subjects,omitempty"`
}

// History is everything the checker judges.
type History struct {
	Seed     int64         `json:"seed"`
	Start    time.Time     `json:"start"`
	FaultEnd time.Time     `json:"fault_end"`
	Bound    time.Duration `json:"bound"`
	// FailoverBound holds writes whose stream leader was killed or
	// stopped within Bound after their answer.
	FailoverBound time.Duration `json:"failover_bound"`
	Nodes         []string      `json:"nodes"`
	Apps          []string      `json:"apps"`

	mu       sync.Mutex
	Writes   []Write    `json:"writes"`
	Events   []Event    `json:"events"`
	Obs      []Obs      `json:"obs"`
	Segments []Segment  `json:"segments"`
	Store    StoreState `json:"store"`
	Finals   []Final    `json:"finals"`
}

func (h *History) addWrite(w Write) {
	h.mu.Lock()
	h.Writes = append(h.Writes, w)
	h.mu.Unlock()
}

func (h *History) addEvent(e Event) {
	h.mu.Lock()
	h.Events = append(h.Events, e)
	h.mu.Unlock()
}

func (h *History) addObs(o Obs) {
	h.mu.Lock()
	h.Obs = append(h.Obs, o)
	h.mu.Unlock()
}

func (h *History) addSegment(s Segment) {
	h.mu.Lock()
	h.Segments = append(h.Segments, s)
	h.mu.Unlock()
}

// Save writes the history as JSON (to replay the checker on it).
func (h *History) Save(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Load reads a saved history.
func Load(path string) (*History, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	return &h, json.Unmarshal(b, &h)
}
