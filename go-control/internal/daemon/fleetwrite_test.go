package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/change"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natskv"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// fakeLink is a fleet whose store answers what the test says, and which
// never serves anything by itself: whatever reaches the engine during a
// write came from the write path, which must send nothing.
type fakeLink struct {
	mu      sync.Mutex
	view    *store.View
	err     error // Commit's answer; nil: stored at revision 7
	commits []string
	served  bool
}

func (l *fakeLink) View() (*store.View, error) { return l.view, nil }

func (l *fakeLink) Commit(ctx context.Context, _ *store.View, id string, ops ...store.Op) (store.Committed, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits = append(l.commits, id)
	if l.err != nil {
		return store.Committed{}, l.err
	}
	return store.Committed{ChangeID: id, Bucket: "sluice_routes", Revision: 7}, nil
}

func (l *fakeLink) WaitServed(ctx context.Context, bucket string, rev uint64) bool {
	if l.served {
		return true
	}
	<-ctx.Done()
	return false
}

func (r *running) doHeaders(method, path, body string, hdr ...string) (int, string, http.Header) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.base+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", bodyTypeOf(path))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), resp.Header
}

// The contract of a fleet write, and save before serve: the write path
// never touches the engine, whatever the store answers.
func TestFleetWriteOutcomes(t *testing.T) {
	link := &fakeLink{view: store.NewView("sluice", 3, nil), served: true}
	r := start(t, t.TempDir(), testConfig(t, ""), func(o *Options) { o.Store, o.Fleet = link.view, link })
	applies := r.fake.Applies()
	routes := `[{"name":"all","shard":"gddr6-training"}]`

	code, body, h := r.doHeaders("PUT", "/v1/routes", routes, "Idempotency-Key", "k-1")
	if code != 200 || h.Get("Sluice-Change-Id") != "k-1" || h.Get("Sluice-Revision") != "7" || h.Get("Sluice-Bucket") != "sluice_routes" {
		t.Fatalf("stored: %d %s %v", code, body, h)
	}
	if link.commits[0] != "k-1" {
		t.Fatalf("change id: %v", link.commits)
	}

	unknown := &natskv.UnknownError{ChangeID: "k-2", Bucket: "sluice_routes", Keys: []string{"routes"}, Base: []uint64{3},
		Attempts: 4, Cause: context.DeadlineExceeded}
	for _, c := range []struct {
		err        error
		code       int
		name       string
		retryAfter bool
	}{
		{fmt.Errorf("%w: routes moved", errs.ErrConflict), 409, "conflict", true},
		{fmt.Errorf("%w: no leader", errs.ErrUnavailable), 503, "unavailable", true},
		{unknown, 504, "outcome_unknown", true},
	} {
		link.err = c.err
		code, body, h := r.doHeaders("PUT", "/v1/routes", routes, "Idempotency-Key", "k-2")
		var doc api.Error
		if err := json.Unmarshal([]byte(body), &doc); err != nil || code != c.code || doc.Code != c.name ||
			(h.Get("Retry-After") != "") != c.retryAfter || h.Get("Sluice-Change-Id") != "k-2" {
			t.Fatalf("%v: %d %s %v", c.err, code, body, h)
		}
		if c.code == 504 {
			if doc.Change == nil || doc.Change.ID != "k-2" || doc.Change.Bucket != "sluice_routes" || doc.Change.BaseRevisions[0] != 3 {
				t.Fatalf("unknown outcome names no change: %s", body)
			}
		}
	}
	// Bad input is refused before anything is written.
	n := len(link.commits)
	if code, body, _ := r.doHeaders("PUT", "/v1/routes", `[{"name":"x","shard":"no-such"}]`); code != 422 {
		t.Fatalf("invalid routes: %d %s", code, body)
	}
	for _, bad := range []string{"has space", ""} {
		if code, _, _ := r.doHeaders("PUT", "/v1/routes", routes, "Idempotency-Key", bad); code != 400 {
			t.Fatalf("bad Idempotency-Key %q: %d", bad, code)
		}
	}
	if len(link.commits) != n {
		t.Fatalf("an invalid change reached the store: %v", link.commits)
	}
	// Stored, but not served here within the wait: still 2xx, said so.
	link.err, link.served = nil, false
	t0 := time.Now()
	code, _, h = r.doHeaders("POST", "/v1/models", `{"name":"m","version":"9","kind":"null"}`)
	if code != 201 || h.Get("Sluice-Served-Here") != "false" || time.Since(t0) < ServeWait {
		t.Fatalf("stored, not served: %d %v after %v", code, h, time.Since(t0))
	}
	if got := r.fake.Applies(); got != applies {
		t.Fatalf("the write path applied to the engine (%d -> %d applies)", applies, got)
	}
	if change.Of("k-2:3/1") != "k-2" || change.Of("sl-x") != "sl-x" {
		t.Fatal("change.Of")
	}
}

// One host keeps no change records, but a malformed Idempotency-Key is
// refused there too (schemathesis found it accepted), and a good one is
// ignored.
func TestIdempotencyKeyCheckedWithoutFleet(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	routes := `[{"name":"all","shard":"gddr6-training"}]`
	applies := r.fake.Applies()
	for _, bad := range []string{"", "has\ttab", "x,y"} {
		if code, body, _ := r.doHeaders("PUT", "/v1/routes", routes, "Idempotency-Key", bad); code != 400 {
			t.Fatalf("bad Idempotency-Key %q: %d %s", bad, code, body)
		}
		if code, body, _ := r.doHeaders("DELETE", "/v1/routes", "", "Idempotency-Key", bad); code != 400 {
			t.Fatalf("DELETE with bad Idempotency-Key %q: %d %s", bad, code, body)
		}
	}
	if n := r.fake.Applies(); n != applies {
		t.Fatalf("a refused call reached the engine: %d applies, had %d", n, applies)
	}
	if code, body, h := r.doHeaders("PUT", "/v1/routes", routes, "Idempotency-Key", "k-1"); code != 200 || h.Get("Sluice-Change-Id") != "" {
		t.Fatalf("good key: %d %s %v", code, body, h)
	}
	if code, _, _ := r.doHeaders("GET", "/v1/routes", "", "Idempotency-Key", "has space"); code != 200 {
		t.Fatalf("a read with a bad key: %d", code)
	}
}
