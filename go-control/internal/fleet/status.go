package fleet

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/natskv"
)

// Status is what GET /v1/fleet answers.
type Status struct {
	Name      string   `json:"name"`
	Servers   []string `json:"servers"`
	Connected string   `json:"connected"` // the node in use; "" while reconnecting
	Watching  bool     `json:"watching"`  // every bucket's watch delivers
	// InSync: every bucket's mirror holds what its stream leader last
	// reported, and this engine serves it.
	InSync  bool           `json:"in_sync"`
	Buckets []BucketStatus `json:"buckets"`
	Stats
}

// BucketStatus is one bucket: the store's latest revision, the mirror's,
// and the one this engine serves, so lag is visible.
type BucketStatus struct {
	natskv.Health
	ServedRevision uint64 `json:"served_revision"`
	ServedDigest   string `json:"served_digest"`
	ServedMsAgo    int64  `json:"served_ms_ago"` // since it began serving this revision; -1: nothing yet
	LagRevisions   uint64 `json:"lag_revisions"` // store_revision - served_revision
}

// Status describes the link to the cluster.
func (f *Fleet) Status() Status {
	st := Status{Name: f.name, Servers: f.cfg.Servers, Stats: f.Stats(), Watching: true, InSync: true}
	if f.nc.IsConnected() {
		st.Connected = f.nc.ConnectedUrlRedacted()
	}
	health := append(f.Store.Health(), f.Registry.Bucket().Health())
	f.mu.Lock()
	for _, h := range health {
		b := BucketStatus{Health: h, ServedMsAgo: -1}
		if s, ok := f.served[h.Bucket]; ok {
			b.ServedRevision, b.ServedDigest, b.ServedMsAgo = s.rev, s.digest, time.Since(s.at).Milliseconds()
		}
		if h.StoreRevision > b.ServedRevision {
			b.LagRevisions = h.StoreRevision - b.ServedRevision
		}
		st.Watching = st.Watching && h.WatchUp
		st.InSync = st.InSync && h.InSync && b.LagRevisions == 0
		st.Buckets = append(st.Buckets, b)
	}
	f.mu.Unlock()
	return st
}

// Handler serves Status as JSON (sluiced mounts it at /v1/fleet, behind
// the admin token).
func (f *Fleet) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, `{"error":"method not allowed","code":"invalid_argument"}`, http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(f.Status())
	})
}

// Collector exports the fleet's revisions and counters to /metrics.
func (f *Fleet) Collector() prometheus.Collector { return &collector{f: f} }

type collector struct{ f *Fleet }

var (
	mStore    = prometheus.NewDesc("sluice_fleet_store_revision", "The bucket's last revision as its stream leader last reported.", []string{"bucket"}, nil)
	mMirror   = prometheus.NewDesc("sluice_fleet_mirror_revision", "The revision this appliance's mirror of the bucket holds.", []string{"bucket"}, nil)
	mServed   = prometheus.NewDesc("sluice_fleet_served_revision", "The revision of the bucket this appliance's engine serves.", []string{"bucket"}, nil)
	mLag      = prometheus.NewDesc("sluice_fleet_lag_revisions", "Store revision minus served revision.", []string{"bucket"}, nil)
	mInSync   = prometheus.NewDesc("sluice_fleet_in_sync", "1 if the mirror holds what the stream leader reported, recently.", []string{"bucket"}, nil)
	mAge      = prometheus.NewDesc("sluice_fleet_store_checked_age_seconds", "Age of the stream leader's last answer.", []string{"bucket"}, nil)
	mRestarts = prometheus.NewDesc("sluice_fleet_watch_restarts_total", "Watches re-created after falling behind the stream or failing.", []string{"bucket"}, nil)
	mChecks   = prometheus.NewDesc("sluice_fleet_check_failures_total", "Reads of the stream leader that failed.", []string{"bucket"}, nil)
	mCounters = prometheus.NewDesc("sluice_fleet_events_total", "Fleet loop events.", []string{"event"}, nil)
	mUp       = prometheus.NewDesc("sluice_fleet_connected", "1 while connected to a node of the cluster.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{mStore, mMirror, mServed, mLag, mInSync, mAge, mRestarts, mChecks, mCounters, mUp} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.f.Status()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	n := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, b := range st.Buckets {
		g(mStore, float64(b.StoreRevision), b.Bucket)
		g(mMirror, float64(b.MirrorRevision), b.Bucket)
		g(mServed, float64(b.ServedRevision), b.Bucket)
		g(mLag, float64(b.LagRevisions), b.Bucket)
		in := 0.0
		if b.InSync {
			in = 1
		}
		g(mInSync, in, b.Bucket)
		if b.StoreCheckedMsAgo >= 0 {
			g(mAge, float64(b.StoreCheckedMsAgo)/1e3, b.Bucket)
		}
		n(mRestarts, b.WatchRestarts, b.Bucket)
		n(mChecks, b.CheckFailures, b.Bucket)
	}
	n(mCounters, st.ControlResyncs, "control_applied")
	n(mCounters, st.ControlRefused, "control_refused")
	n(mCounters, st.SchemaRefreshes, "schema_refreshed")
	n(mCounters, st.SchemaFailures, "schema_failed")
	n(mCounters, st.Reconnects, "reconnected")
	n(mCounters, st.ForcedReconnects, "forced_reconnect")
	up := 0.0
	if st.Connected != "" {
		up = 1
	}
	g(mUp, up)
}
