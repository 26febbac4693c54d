package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// observeEvery is how often each appliance is asked what it serves; the
// lag the checker measures is at most this much too long.
const observeEvery = 50 * time.Millisecond

// observe polls every appliance's /v1/fleet for the revisions it serves,
// and notes an appliance that died on its own.
func observe(ctx context.Context, h *History, apps []*appliance) {
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	died := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, a := range apps {
			if a.p.exitedOnItsOwn() && !died[a.name] {
				died[a.name] = true
				h.addEvent(Event{T: time.Now(), Op: "died", Target: "app:" + a.name, Why: "exited on its own; see " + a.p.log})
			}
			if !a.p.running() {
				continue
			}
			st, err := a.fleetStatus(observeEvery * 4)
			if err != nil {
				continue
			}
			now := time.Now()
			o := Obs{T: now, Appliance: a.name, Served: map[string]uint64{}, ServedAt: map[string]time.Time{}, Mirror: map[string]uint64{}}
			for _, b := range st.Buckets {
				o.Mirror[b.Bucket] = b.MirrorRevision
				if b.ServedMsAgo >= 0 {
					o.Served[b.Bucket] = b.ServedRevision
					o.ServedAt[b.Bucket] = now.Add(-time.Duration(b.ServedMsAgo) * time.Millisecond)
				}
			}
			h.addObs(o)
		}
	}
}

// segmentLen is one data-plane client run; rate is per appliance.
const segmentLen = time.Second

// traffic drives each appliance's data plane with perf's loadgen in
// one-second segments at rate requests/s, recording every segment's
// answers, until ctx ends.
func traffic(ctx context.Context, h *History, a *appliance, loadgen, mix string, rate int) {
	for ctx.Err() == nil {
		if !a.p.running() {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		seg := Segment{Appliance: a.name, Start: time.Now()}
		cmd := exec.Command(loadgen, "--addr", a.data, "--mix", mix, "--rate", fmt.Sprint(rate),
			"--duration", segmentLen.String(), "--timeout", "500ms", "--block", "--json")
		out, err := cmd.Output()
		seg.End = time.Now()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				msg += ": " + strings.TrimSpace(string(ee.Stderr))
			}
			seg.Failed = msg
		} else {
			var r struct {
				Sent      uint64           `json:"sent"`
				OK        uint64           `json:"ok"`
				Timeouts  uint64           `json:"timeouts"`
				Malformed uint64           `json:"malformed"`
				IOErrors  uint64           `json:"io_errors"`
				Errors    map[string]int64 `json:"errors"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				seg.Failed = "unreadable loadgen output: " + err.Error()
			} else {
				seg.Sent, seg.OK, seg.Timeouts, seg.Malformed, seg.IOErrors, seg.Errors = r.Sent, r.OK, r.Timeouts, r.Malformed, r.IOErrors, r.Errors
			}
		}
		h.addSegment(seg)
	}
}

// writeMix writes the data plane's request mix: the null and echo models
// as tenant demo.
func writeMix(dir string) (string, error) {
	mix := `[[request]]
weight = 3
model = "null"
version = "1"
intent = "chat"
tenant_id = 1
key = "` + demoKey + `"
[[request.tensors]]
name = "x"
dtype = "f32"
shape = [1, 4]
fill = 0.5

[[request]]
weight = 1
model = "echo"
version = "1"
tenant_id = 1
key = "` + demoKey + `"
[[request.tensors]]
name = "x"
dtype = "f32"
shape = [1, 8]
fill = 1.0
`
	path := filepath.Join(dir, "mix.toml")
	return path, os.WriteFile(path, []byte(mix), 0o600)
}
