package faults

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is the checker's verdict on a history.
type Report struct {
	Violations []string
	Lines      []string // statistics, printable
}

// OK reports whether no violation was found.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

func (r *Report) line(format string, args ...any) {
	r.Lines = append(r.Lines, fmt.Sprintf(format, args...))
}

// interval is a span when a target was down (killed, stopped, starting).
type interval struct{ from, to time.Time }

type timeline struct {
	down map[string][]interval // by target
	end  time.Time
}

// buildTimeline reads the fault events: a NATS node is down from kill to
// start and from stop to cont; an appliance from kill to serving, from
// stop to cont, and for good once it died on its own.
func buildTimeline(events []Event, end time.Time) *timeline {
	tl := &timeline{down: map[string][]interval{}, end: end}
	open := map[string]time.Time{}
	evs := slices.Clone(events)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].T.Before(evs[j].T) })
	for _, e := range evs {
		isApp := strings.HasPrefix(e.Target, "app:")
		switch {
		case e.Op == "kill" || e.Op == "stop" || e.Op == "died":
			if _, ok := open[e.Target]; !ok {
				open[e.Target] = e.T
			}
		case e.Op == "cont" || e.Op == "serving" || e.Op == "start" && !isApp:
			if from, ok := open[e.Target]; ok {
				tl.down[e.Target] = append(tl.down[e.Target], interval{from, e.T})
				delete(open, e.Target)
			}
		}
	}
	for t, from := range open {
		tl.down[t] = append(tl.down[t], interval{from, end.Add(time.Hour)})
	}
	return tl
}

func (tl *timeline) upThroughout(target string, from, to time.Time) bool {
	for _, iv := range tl.down[target] {
		if iv.from.Before(to) && iv.to.After(from) {
			return false
		}
	}
	return true
}

// natsUp counts the NATS nodes up at t.
func (tl *timeline) natsUp(nodes []string, t time.Time) int {
	n := 0
	for _, node := range nodes {
		up := true
		for _, iv := range tl.down[node] {
			if !t.Before(iv.from) && t.Before(iv.to) {
				up = false
			}
		}
		if up {
			n++
		}
	}
	return n
}

// majorityThroughout: at least two of three nodes up over [from, to].
func (tl *timeline) majorityThroughout(nodes []string, from, to time.Time) bool {
	points := []time.Time{from}
	for _, node := range nodes {
		for _, iv := range tl.down[node] {
			for _, t := range []time.Time{iv.from, iv.to} {
				if t.After(from) && t.Before(to) {
					points = append(points, t)
				}
			}
		}
	}
	for _, t := range points {
		if tl.natsUp(nodes, t) < len(nodes)/2+1 {
			return false
		}
	}
	return true
}

// natsEventIn reports a NATS fault event within [from, to].
func natsEventIn(events []Event, from, to time.Time) bool {
	for _, e := range events {
		if strings.HasPrefix(e.Target, "nats:") && !e.T.Before(from) && !e.T.After(to) {
			return true
		}
	}
	return false
}

// leaderFailed reports a kill or stop of bucket's stream leader within
// [from, to].
func leaderFailed(events []Event, bucket string, from, to time.Time) bool {
	for _, e := range events {
		if (e.Op == "kill" || e.Op == "stop") && !e.T.Before(from) && !e.T.After(to) && slices.Contains(e.Leads, bucket) {
			return true
		}
	}
	return false
}

// bucketOf names the bucket a write kind goes to.
func bucketOf(kind string) string {
	switch kind {
	case "routes":
		return "sluice_routes"
	case "tenants":
		return "sluice_tenants"
	case "model":
		return "sluice_models"
	case "alias":
		return "sluice_aliases"
	case "schema":
		return "sluice_schemas"
	}
	return ""
}

type lagStats struct {
	lags  []time.Duration
	worst string
}

func (l *lagStats) add(d time.Duration, what string) {
	if len(l.lags) == 0 || d > slices.Max(l.lags) {
		l.worst = what
	}
	l.lags = append(l.lags, d)
}

func (l *lagStats) String() string {
	if len(l.lags) == 0 {
		return "none"
	}
	s := slices.Clone(l.lags)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v (%s)", len(s), q(0.5).Round(time.Millisecond),
		q(0.9).Round(time.Millisecond), q(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), l.worst)
}

// checker holds what the checks of one history share.
type checker struct {
	h      *History
	r      *Report
	tl     *timeline
	stored map[string][]StoreMsg // by change id

	byKind                             map[string]*tally
	codes                              map[string]int
	steady, majority, faulty, failover lagStats
}

type tally struct{ ok, refused, unknown, unknownLanded int }

var writeKinds = []string{"routes", "tenants", "model", "alias", "schema"}

// Check judges a history:
//
//   - every write answered 2xx is in the store;
//   - no write answered as refused is in the store;
//   - each change is stored at most once per key;
//   - unknown-outcome writes: in the store or not (both fine), and then
//     served by every appliance exactly as the store holds it: at the end
//     every appliance serves each bucket's last revision, with the same
//     digest, and its admin API reads back what the store holds;
//   - from the answer of a 2xx write to every appliance serving it takes
//     less than the bound, while a majority of the nodes is up (and the
//     appliance itself was up);
//   - the data plane answered every request sent to an appliance that was
//     up, throughout the NATS faults;
//   - no appliance died on its own.
func Check(h *History) *Report {
	c := &checker{h: h, r: &Report{}, tl: buildTimeline(h.Events, h.FaultEnd), stored: map[string][]StoreMsg{},
		byKind: map[string]*tally{}, codes: map[string]int{}}
	for _, m := range h.Store.Msgs {
		if m.ChangeID != "" {
			c.stored[m.ChangeID] = append(c.stored[m.ChangeID], m)
		}
	}
	for b, ok := range h.Store.Complete {
		if !ok {
			c.r.violate("bucket %s: history incomplete (a sequence is missing), so absence cannot be proven", b)
		}
	}
	for _, k := range writeKinds {
		c.byKind[k] = &tally{}
	}
	for _, w := range h.Writes {
		c.write(w)
	}
	c.finals()
	c.dataPlane()
	for _, e := range h.Events {
		if e.Op == "died" {
			c.r.violate("%s died on its own at %s (%s)", e.Target, e.T.Format("15:04:05.000"), e.Why)
		}
	}
	c.stats()
	return c.r
}

// write checks one write against the store and, when acknowledged, the
// time until every appliance served it.
func (c *checker) write(w Write) {
	r := c.r
	t := c.byKind[w.Kind]
	msgs := c.stored[w.ID]
	keys := map[string]int{}
	var rev uint64
	for _, m := range msgs {
		keys[m.Key]++
		if m.Bucket == bucketOf(w.Kind) {
			rev = max(rev, m.Seq)
		}
	}
	for k, n := range keys {
		if n > 1 {
			r.violate("write %s (%s on %s): stored %d times under key %s", w.ID, w.Kind, w.Appliance, n, k)
		}
	}
	c.codes[fmt.Sprintf("%d %s", w.Status, w.Code)]++
	switch w.Outcome {
	case OutcomeOK:
		t.ok++
		if len(msgs) == 0 {
			r.violate("write %s (%s on %s) answered %d but is not in the store", w.ID, w.Kind, w.Appliance, w.Status)
			return
		}
	case OutcomeRefused:
		t.refused++
		if len(msgs) > 0 {
			r.violate("write %s (%s on %s) answered %d %s (not applied) but the store has it at %s#%d",
				w.ID, w.Kind, w.Appliance, w.Status, w.Code, msgs[0].Bucket, msgs[0].Seq)
		}
		return
	case OutcomeUnknown:
		t.unknown++
		if len(msgs) > 0 {
			t.unknownLanded++
		}
		if w.Status != 0 && w.Status != 504 {
			r.violate("write %s (%s on %s): status %d is outside the fleet write contract: %s", w.ID, w.Kind, w.Appliance, w.Status, w.Detail)
		}
		return
	}
	c.lag(w, rev)
}

// lag measures an acknowledged write's answer-to-served-everywhere time
// and holds it to its bound.
func (c *checker) lag(w Write, rev uint64) {
	h, r, tl := c.h, c.r, c.tl
	bucket := bucketOf(w.Kind)
	win := h.Bound
	if !tl.majorityThroughout(h.Nodes, w.End, w.End.Add(win)) {
		return
	}
	var worst time.Duration
	missing := ""
	for _, app := range h.Apps {
		if !tl.upThroughout("app:"+app, w.End.Add(-time.Second), w.End.Add(win)) {
			continue
		}
		seen := false
		for _, o := range h.Obs {
			if o.Appliance == app && o.Served[bucket] >= rev {
				// When it began serving a revision this new: its own
				// clock (the same host), else when it was seen.
				at := o.T
				if t, ok := o.ServedAt[bucket]; ok && t.Before(at) {
					at = t
				}
				worst = max(worst, max(0, at.Sub(w.End)))
				seen = true
				break
			}
		}
		if !seen {
			missing = app
		}
	}
	what := fmt.Sprintf("%s %s on %s at %s#%d", w.ID, w.Kind, w.Appliance, bucket, rev)
	if missing != "" {
		r.violate("write %s: appliance %s was up but never served it", what, missing)
		return
	}
	if leaderFailed(h.Events, bucket, w.End, w.End.Add(win)) {
		// The leader acknowledged it and died: the followers learn that it
		// is committed only from the next leader.
		c.failover.add(worst, what)
		if worst > h.FailoverBound {
			r.violate("write %s: served everywhere %v after its answer, its stream leader failing meanwhile (bound %v)",
				what, worst.Round(time.Millisecond), h.FailoverBound)
		}
		return
	}
	c.majority.add(worst, what)
	if natsEventIn(h.Events, w.End.Add(-time.Second), w.End.Add(win)) {
		c.faulty.add(worst, what)
	} else {
		c.steady.add(worst, what)
	}
	if worst > h.Bound {
		r.violate("write %s: served everywhere %v after its answer (bound %v, a majority of nodes up)", what, worst.Round(time.Millisecond), h.Bound)
	}
}

// finals: every appliance ends serving exactly what the store holds.
func (c *checker) finals() {
	h, r := c.h, c.r
	for _, f := range h.Finals {
		if f.Err != "" {
			r.violate("appliance %s: final read: %s", f.Appliance, f.Err)
			continue
		}
		for b, last := range h.Store.Last {
			if f.Served[b] != last || f.Digests[b] != h.Store.Digests[b] {
				r.violate("appliance %s serves %s at %d (digest %s); the store has %d (digest %s)",
					f.Appliance, b, f.Served[b], f.Digests[b], last, h.Store.Digests[b])
			}
		}
		if len(h.Store.Routes) > 0 && !sameJSON(f.Routes, h.Store.Routes) {
			r.violate("appliance %s reads back routes %s; the store has %s", f.Appliance, f.Routes, h.Store.Routes)
		}
		if !slices.Equal(f.Subjects, h.Store.Subjects) && !(len(f.Subjects) == 0 && len(h.Store.Subjects) == 0) {
			r.violate("appliance %s lists %d subjects; the store has %d", f.Appliance, len(f.Subjects), len(h.Store.Subjects))
		}
	}
}

// dataPlane: every request to an appliance that was up was answered.
func (c *checker) dataPlane() {
	h, r, tl := c.h, c.r, c.tl
	var segs, segsNATS int
	var sent, answered, sentNATS uint64
	for _, s := range h.Segments {
		if !tl.upThroughout("app:"+s.Appliance, s.Start.Add(-500*time.Millisecond), s.End.Add(500*time.Millisecond)) {
			continue
		}
		segs++
		sent += s.Sent
		answered += s.OK
		duringNATS := false
		for _, node := range h.Nodes {
			if !tl.upThroughout(node, s.Start, s.End) {
				duringNATS = true
			}
		}
		if duringNATS {
			segsNATS++
			sentNATS += s.Sent
		}
		bad := s.Timeouts + s.Malformed + s.IOErrors
		for _, n := range s.Errors {
			bad += uint64(n)
		}
		if s.Failed != "" || bad > 0 || s.OK != s.Sent {
			r.violate("data plane of %s at %s: sent %d, ok %d, timeouts %d, errors %v, io %d %s",
				s.Appliance, s.Start.Format("15:04:05.000"), s.Sent, s.OK, s.Timeouts, s.Errors, s.IOErrors, s.Failed)
		}
	}
	r.line("data plane: %d segments with the appliance up, %d requests sent, %d answered; %d segments (%d requests) while a NATS node was down",
		segs, sent, answered, segsNATS, sentNATS)
}

// stats prints the history's statistics (before the data plane's line,
// which dataPlane wrote).
func (c *checker) stats() {
	h := c.h
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	add("seed %d; fault phase %v", h.Seed, h.FaultEnd.Sub(h.Start).Round(time.Second))
	total := 0
	for _, k := range writeKinds {
		t := c.byKind[k]
		total += t.ok + t.refused + t.unknown
		add("writes %-8s ok %4d  refused %4d  unknown %4d (landed %d)", k, t.ok, t.refused, t.unknown, t.unknownLanded)
	}
	add("writes total %d; answers: %s", total, fmtCounts(c.codes))
	faults := map[string]int{}
	for _, e := range h.Events {
		if e.Op == "kill" || e.Op == "stop" {
			kind := strings.SplitN(e.Target, ":", 2)[0]
			why := e.Why
			if kind == "nats" && why == "" {
				why = "random"
			}
			faults[strings.TrimSpace(fmt.Sprintf("%s %s %s", e.Op, kind, why))]++
		}
	}
	add("faults: %s", fmtCounts(faults))
	add("ack to served everywhere, majority up, stream leader alive (bound %v): %s", h.Bound, c.majority.String())
	add("  of which no NATS fault event within 1 s before or the bound after: %s", c.steady.String())
	add("  of which a NATS node was killed, stopped or restarted meanwhile: %s", c.faulty.String())
	add("ack to served everywhere, the stream's leader killed or stopped right after (bound %v): %s", h.FailoverBound, c.failover.String())
	c.r.Lines = append(lines, c.r.Lines...)
	for _, f := range h.Finals {
		c.r.line("appliance %s: %s", f.Appliance, fmtCounts64(f.Stats))
	}
}

func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(x, y)
}

func fmtCounts(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func fmtCounts64(m map[string]uint64) string {
	c := map[string]int{}
	for k, v := range m {
		c[k] = int(v)
	}
	return fmtCounts(c)
}
