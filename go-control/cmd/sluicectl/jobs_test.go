package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/daemon"
)

// stubIngress answers /v1/jobs with a fixed document (the real ingress is
// tested in internal/jobs and its e2e suite).
type stubIngress struct{ doc api.JobsDoc }

func (s *stubIngress) Start(daemon.IngressHost) error   { return nil }
func (s *stubIngress) Drain(context.Context) error      { return nil }
func (s *stubIngress) Status() api.JobsDoc              { return s.doc }
func (s *stubIngress) Describe(chan<- *prometheus.Desc) {}
func (s *stubIngress) Collect(chan<- prometheus.Metric) {}

func TestJobsCommand(t *testing.T) {
	addr, _ := startDaemon(t, "")
	env := map[string]string{"SLUICE_ADDR": addr}
	if out := mustCtl(t, env, "jobs"); !strings.Contains(out, "no [[jobs.streams]] configured") {
		t.Fatalf("jobs without streams:\n%s", out)
	}
	doc := api.JobsDoc{Enabled: true, Connected: "nats://127.0.0.1:4222", Streams: []api.JobStreamDoc{{
		Stream: "ai-inference", Consumer: "sluice", State: "consuming", Lag: 12, AckPending: 3, MaxAckPending: 256, InFlight: 3,
		LastError: "fetch: nats: timeout",
		Counters: api.JobCounters{Received: 100, Acked: 95, Naked: 2, DeadLettered: 4, Redelivered: 2, Results: 91, Duplicates: 1, Expired: 1,
			DeadLetterCodes: map[string]uint64{"unknown_model": 3, "expired": 1}},
	}}}
	addr, _ = startDaemon(t, "", func(o *daemon.Options) { o.Ingress = &stubIngress{doc: doc} })
	env = map[string]string{"SLUICE_ADDR": addr}
	out := mustCtl(t, env, "jobs")
	for _, want := range []string{
		"STREAM        CONSUMER  STATE      LAG  ACK_PENDING  IN_FLIGHT  RECEIVED  ACKED  NAKED  DEAD  REDELIVERED  RESULTS  DUPLICATES  EXPIRED",
		"ai-inference  sluice    consuming  12   3/256        3          100       95     2      4     2            91       1           1",
		"nats: nats://127.0.0.1:4222",
		"ai-inference dead letters: expired=1 unknown_model=3",
		"ai-inference last error: fetch: nats: timeout",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("jobs output lacks %q:\n%s", want, out)
		}
	}
	var got api.JobsDoc
	if err := json.Unmarshal([]byte(mustCtl(t, env, "-json", "jobs")), &got); err != nil || got.Streams[0].Counters.Results != 91 {
		t.Fatalf("jobs -json: %v %+v", err, got)
	}
	if code, _, _ := ctl(t, env, "jobs", "extra"); code != 2 {
		t.Fatalf("jobs extra: exit %d, want usage (2)", code)
	}
}
