package jobs

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

func jdesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("sluice_jobs_"+name, help, append([]string{"stream", "consumer"}, labels...), nil)
}

// Metrics of the ingress, per stream and consumer (bounded: at most
// config.JobStreamsMax of them), read at each scrape.
var (
	mLag          = jdesc("consumer_lag", "Messages stored and not yet delivered to any appliance (the consumer's num_pending, read every 2 s).")
	mAckPending   = jdesc("consumer_ack_pending", "Messages delivered and not yet acked, fleet-wide.")
	mMaxAck       = jdesc("consumer_max_ack_pending", "The consumer's back-pressure bound on ack_pending.")
	mInFlight     = jdesc("in_flight", "Messages this appliance holds now.")
	mReceived     = jdesc("received_total", "Messages fetched.")
	mRedelivered  = jdesc("redelivered_total", "Messages fetched that had been delivered before (to any appliance).")
	mAcked        = jdesc("acked_total", "Messages acked (their result or dead letter stored, or skipped).")
	mNaked        = jdesc("naked_total", "Messages nak'ed for a retryable error, to come back after nak_delay_ms.")
	mResults      = jdesc("results_total", "Results stored.")
	mDuplicates   = jdesc("duplicates_total", "Result or dead-letter publishes JetStream found already stored (same Nats-Msg-Id).")
	mDeadLettered = jdesc("dead_lettered_total", "Dead letters stored, by code.", "code")
	mSkipped      = jdesc("skipped_total", "Results or dead letters met on the consumer, acked without running.")
	mPubErrors    = jdesc("publish_errors_total", "Result or dead-letter publishes that failed (the message was nak'ed).")
	mFetchErrors  = jdesc("fetch_errors_total", "Pull requests that failed.")
	mUp           = prometheus.NewDesc("sluice_jobs_connected", "1 while the ingress is connected to NATS.", nil, nil)
	allDescs      = []*prometheus.Desc{mLag, mAckPending, mMaxAck, mInFlight, mReceived, mRedelivered, mAcked, mNaked,
		mResults, mDuplicates, mDeadLettered, mSkipped, mPubErrors, mFetchErrors, mUp}
)

// Describe implements prometheus.Collector.
func (in *Ingress) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (in *Ingress) Collect(ch chan<- prometheus.Metric) {
	doc := in.Status()
	up := 0.0
	if doc.Connected != "" {
		up = 1
	}
	emit(ch, mUp, prometheus.GaugeValue, up)
	for _, s := range doc.Streams {
		l := []string{s.Stream, s.Consumer}
		g := func(d *prometheus.Desc, v float64) { emit(ch, d, prometheus.GaugeValue, v, l...) }
		c := func(d *prometheus.Desc, v uint64) { emit(ch, d, prometheus.CounterValue, float64(v), l...) }
		g(mLag, float64(s.Lag))
		g(mAckPending, float64(s.AckPending))
		g(mMaxAck, float64(s.MaxAckPending))
		g(mInFlight, float64(s.InFlight))
		k := s.Counters
		c(mReceived, k.Received)
		c(mRedelivered, k.Redelivered)
		c(mAcked, k.Acked)
		c(mNaked, k.Naked)
		c(mResults, k.Results)
		c(mDuplicates, k.Duplicates)
		c(mSkipped, k.Skipped)
		c(mPubErrors, k.PublishErrors)
		c(mFetchErrors, k.FetchErrors)
		codes := make([]string, 0, len(k.DeadLetterCodes))
		for code := range k.DeadLetterCodes {
			codes = append(codes, code)
		}
		sort.Strings(codes)
		for _, code := range codes {
			emit(ch, mDeadLettered, prometheus.CounterValue, float64(k.DeadLetterCodes[code]), s.Stream, s.Consumer, code)
		}
	}
}

// emit sends a metric, dropping (never panicking on) a malformed one.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	if m, err := prometheus.NewConstMetric(d, t, v, labels...); err == nil {
		ch <- m
	}
}
