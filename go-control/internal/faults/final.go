package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natskv"
)

// readStore reads every message of every bucket from the stream leaders
// (the suite keeps history per key, so nothing was removed): the record of
// which changes the store took.
func readStore(ctx context.Context, c *natsCluster, buckets []string) (StoreState, error) {
	st := StoreState{Last: map[string]uint64{}, Digests: map[string]string{}, Complete: map[string]bool{}}
	for _, name := range buckets {
		var b *natskv.Bucket
		err := retryJS(ctx, jsRecoverWithin, func(actx context.Context) error {
			var err error
			b, err = natskv.Open(actx, c.js, natskv.Options{Bucket: name, Replicas: 3, History: historyPerKey, OpTimeout: 5 * time.Second})
			return err
		})
		if err != nil {
			return st, err
		}
		var s jetstream.Stream
		err = retryJS(ctx, jsRecoverWithin, func(actx context.Context) error {
			var err error
			s, err = c.js.Stream(actx, natskv.StreamName(name))
			return err
		})
		if err != nil {
			return st, fmt.Errorf("stream %s: %w", name, err)
		}
		last := s.CachedInfo().State.LastSeq
		st.Last[name], st.Complete[name] = last, true
		latest := map[string]natskv.Entry{}
		for seq := uint64(1); seq <= last; seq++ {
			// Retried until jsRecoverWithin: right after the repairs a
			// stream may have no leader yet, and JetStream answers 503 at
			// once (a count of attempts would give up in a second).
			var e natskv.Entry
			notFound := false
			err = retryJS(ctx, jsRecoverWithin, func(actx context.Context) error {
				var err error
				e, err = b.LeaderSeq(actx, seq)
				if errors.Is(err, errs.ErrNotFound) {
					notFound = true // a gap in the stream: an answer, not a failure
					return nil
				}
				return err
			})
			if notFound {
				err = errs.ErrNotFound
			}
			if errors.Is(err, errs.ErrNotFound) {
				st.Complete[name] = false
				continue
			}
			if err != nil {
				return st, fmt.Errorf("%s seq %d: %w", name, seq, err)
			}
			st.Msgs = append(st.Msgs, StoreMsg{Bucket: name, Seq: seq, Key: e.Key, ChangeID: e.ChangeID, Deleted: e.Deleted})
			latest[e.Key] = e
		}
		var live []natskv.Entry
		for _, e := range latest {
			if !e.Deleted {
				live = append(live, e)
			}
		}
		sort.Slice(live, func(i, j int) bool { return live[i].Key < live[j].Key })
		st.Digests[name] = natskv.DigestOf(live)
		for _, e := range live {
			switch {
			case strings.HasSuffix(name, "_routes") && e.Key == "routes":
				st.Routes = e.Value
			case strings.HasSuffix(name, "_schemas") && strings.HasPrefix(e.Key, "subjects/"):
				var v struct {
					Subject string `json:"subject"`
					Deleted bool   `json:"deleted"`
				}
				if json.Unmarshal(e.Value, &v) == nil && !v.Deleted {
					st.Subjects = append(st.Subjects, v.Subject)
				}
			}
		}
		sort.Strings(st.Subjects)
		st.Subjects = dedup(st.Subjects)
	}
	return st, nil
}

// jsRecoverWithin bounds how long a JetStream API call may keep failing
// after the repairs: a node that rejoins and streams that elect leaders
// answer errors for a while (the nemesis's longest hold is a few seconds).
const jsRecoverWithin = 60 * time.Second

// retryJS calls op (each call with its own 5 s context) until it succeeds,
// within the bound, or ctx ends; it returns the last error.
func retryJS(ctx context.Context, within time.Duration, op func(context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// quiesce waits until every appliance serves what every stream's leader
// has, and says how long that took.
func quiesce(ctx context.Context, c *natsCluster, apps []*appliance, buckets []string, within time.Duration) (time.Duration, error) {
	t0 := time.Now()
	for {
		last := map[string]uint64{}
		ok := true
		for _, b := range buckets {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := c.js.Stream(sctx, natskv.StreamName(b))
			cancel()
			if err != nil {
				ok = false
				break
			}
			last[b] = s.CachedInfo().State.LastSeq
		}
		for _, a := range apps {
			if !ok {
				break
			}
			st, err := a.fleetStatus(time.Second)
			if err != nil {
				ok = false
				break
			}
			for _, bs := range st.Buckets {
				if bs.ServedRevision != last[bs.Bucket] {
					ok = false
				}
			}
		}
		if ok {
			return time.Since(t0), nil
		}
		if time.Since(t0) > within || ctx.Err() != nil {
			return time.Since(t0), fmt.Errorf("the fleet did not settle within %v", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finals reads what each appliance serves, once the fleet settled.
func finals(apps []*appliance) []Final {
	var out []Final
	for _, a := range apps {
		f := Final{Appliance: a.name, Served: map[string]uint64{}, Digests: map[string]string{}, Stats: map[string]uint64{}}
		st, err := a.fleetStatus(5 * time.Second)
		if err != nil {
			f.Err = err.Error() + "; its goroutines are in " + a.p.log
			a.p.signal(syscall.SIGQUIT, false) // Go prints every goroutine's stack
			out = append(out, f)
			continue
		}
		for _, b := range st.Buckets {
			f.Served[b.Bucket], f.Digests[b.Bucket] = b.ServedRevision, b.ServedDigest
			f.Stats["watch_restarts"] += b.WatchRestarts
			f.Stats["check_failures"] += b.CheckFailures
		}
		f.Stats["forced_reconnects"] = st.ForcedReconnects
		f.Stats["reconnects"] = st.Reconnects
		f.Stats["control_refused"] = st.ControlRefused
		var routes struct {
			Routes json.RawMessage `json:"routes"`
		}
		if err := a.getJSON("/v1/routes", &routes); err != nil {
			f.Err = err.Error()
		}
		f.Routes = routes.Routes
		if err := a.getJSON("/registry/subjects", &f.Subjects); err != nil {
			f.Err = err.Error()
		}
		sort.Strings(f.Subjects)
		out = append(out, f)
	}
	return out
}
