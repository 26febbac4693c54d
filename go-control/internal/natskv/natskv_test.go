package natskv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natstest"
)

// waitFor is a failure bound of the tests, not a timing assertion.
const waitFor = 20 * time.Second

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t *testing.T, js jetstream.JetStream, bucket string, replicas int) *Bucket {
	t.Helper()
	b, err := Open(context.Background(), js, Options{Bucket: bucket, Replicas: replicas, History: 8,
		OpTimeout: 2 * time.Second, CheckInterval: 100 * time.Millisecond, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func started(t *testing.T, b *Bucket) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := b.Start(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
}

// until polls cond and fails after waitFor; it returns how long it took.
func until(t *testing.T, what string, cond func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	for !cond() {
		if time.Since(t0) > waitFor {
			t.Fatalf("%s: not within %v", what, waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(t0)
}

func TestWriteOutcomes(t *testing.T) {
	c := natstest.Start(t, 1)
	_, js := c.Connect()
	b := open(t, js, "t_outcomes", 1)
	started(t, b)
	ctx := context.Background()

	r1, err := b.Write(ctx, "c1", Op{Key: "routes", Value: []byte(`[1]`)})
	if err != nil || r1.Revision == 0 || r1.Duplicate {
		t.Fatalf("create: %+v %v", r1, err)
	}
	// A write based on a revision that moved is refused whole: nothing stored.
	if _, err := b.Write(ctx, "c2", Op{Key: "routes", Value: []byte(`[2]`)}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("blind create over a write: %v", err)
	}
	// The same change again (same id, same base): not applied twice.
	again, err := b.Write(ctx, "c1", Op{Key: "routes", Value: []byte(`[1]`)})
	if err != nil || !again.Duplicate || again.Revision != r1.Revision {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	r3, err := b.Write(ctx, "c3", Op{Key: "routes", Value: []byte(`[3]`), Expect: r1.Revision})
	if err != nil || r3.Revision <= r1.Revision {
		t.Fatalf("update: %+v %v", r3, err)
	}
	// A batch is all or nothing: one stale base refuses every key.
	_, err = b.Write(ctx, "c4", Op{Key: "peer.a", Value: []byte(`a`)}, Op{Key: "routes", Value: []byte(`[4]`), Expect: r1.Revision})
	if !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale batch: %v", err)
	}
	r5, err := b.Write(ctx, "c5", Op{Key: "peer.a", Value: []byte(`a`)}, Op{Key: "routes", Delete: true, Expect: r3.Revision})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	// The repeat of a stored batch is known as stored, at its revision.
	if r, err := b.Write(ctx, "c5", Op{Key: "peer.a", Value: []byte(`a`)}, Op{Key: "routes", Delete: true, Expect: r3.Revision}); err != nil || !r.Duplicate || r.Revision != r5.Revision {
		t.Fatalf("repeated batch: %+v %v", r, err)
	}
	until(t, "mirror at the batch", func() bool { return b.Snapshot().Revision >= r5.Revision })
	s := b.Snapshot()
	if _, ok := s.Get("routes"); ok || s.KeyRevision("routes") != r5.Revision {
		t.Fatalf("routes after delete: rev %d", s.KeyRevision("routes"))
	}
	if e, ok := s.Get("peer.a"); !ok || string(e.Value) != "a" || e.ChangeID != "c5" {
		t.Fatalf("peer.a: %+v", e)
	}
	if _, err := b.Write(ctx, "c4", Op{Key: "peer.a", Value: []byte(`x`)}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale create: %v", err)
	}
	if _, err := b.Write(ctx, "bad id", Op{Key: "k"}); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad change id: %v", err)
	}
	h := b.Health()
	if !h.InSync || h.MirrorRevision != r5.Revision || h.StoreRevision != r5.Revision || !h.WatchUp {
		t.Fatalf("health: %+v", h)
	}
}

// Any number of appliances may open the buckets at once on a fresh cluster.
func TestOpenConcurrently(t *testing.T) {
	c := natstest.Start(t, 3)
	var wg sync.WaitGroup
	errc := make(chan error, 24)
	for i := range 6 {
		wg.Go(func() {
			_, js := c.Connect()
			for _, name := range []string{"t_a", "t_b", "t_c", "t_d"} {
				b, err := Open(context.Background(), js, Options{Bucket: name, Replicas: 3, OpTimeout: 2 * time.Second, Log: quiet})
				if err == nil {
					_, err = b.Write(context.Background(), fmt.Sprintf("o%d", i), Op{Key: fmt.Sprintf("k%d", i), Value: []byte("v")})
				}
				if err != nil {
					errc <- fmt.Errorf("opener %d, %s: %w", i, name, err)
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// With the stream leader alive but its quorum gone, a write cannot be
// decided: it is reported unknown, never "not applied". Once the nodes
// are back it lands or it does not, and repeating it with its change id
// never applies it twice.
func TestUnknownOutcomeUnderQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster with restarts")
	}
	c := natstest.Start(t, 3)
	_, js := c.Connect()
	b := open(t, js, "t_quorum", 3)
	started(t, b)
	ctx := context.Background()
	r1, err := b.Write(ctx, "q1", Op{Key: "routes", Value: []byte(`[1]`)})
	if err != nil {
		t.Fatal(err)
	}
	leader := c.StreamLeader(StreamName("t_quorum"))
	var down []int
	for i := range 3 {
		if i != leader {
			c.StopNode(i)
			down = append(down, i)
		}
	}
	_, err = b.Write(ctx, "q2", Op{Key: "routes", Value: []byte(`[2]`), Expect: r1.Revision})
	var unk *UnknownError
	switch {
	case errors.As(err, &unk):
		t.Logf("without quorum: %v", err)
	case errors.Is(err, errs.ErrUnavailable):
		// The leader stepped down before the first attempt reached it:
		// refused, and it must never appear.
		t.Logf("without quorum: refused: %v", err)
	default:
		t.Fatalf("without quorum: %v", err)
	}
	for _, i := range down {
		c.StartNode(i)
	}
	// Repeat until decided: the repeat is the same change.
	var res Result
	until(t, "decided after the nodes returned", func() bool {
		res, err = b.Write(ctx, "q2", Op{Key: "routes", Value: []byte(`[2]`), Expect: r1.Revision})
		return err == nil || errors.Is(err, errs.ErrConflict)
	})
	if unk == nil && (err != nil || res.Duplicate) {
		t.Fatalf("a refused write was applied: %+v %v", res, err)
	}
	until(t, "mirror has it", func() bool { return b.Snapshot().Revision >= res.Revision })
	e, _ := b.Snapshot().Get("routes")
	if e.ChangeID != "q2" || string(e.Value) != `[2]` {
		t.Fatalf("routes: %+v", e)
	}
	// Exactly one message of the change in the history.
	n := 0
	for seq := uint64(1); seq <= b.Snapshot().Revision; seq++ {
		if m, err := b.LeaderSeq(ctx, seq); err == nil && m.ChangeID == "q2" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("change q2 stored %d times", n)
	}
	t.Logf("decided: duplicate=%v revision=%d", res.Duplicate, res.Revision)
}

// The node behind a mirror's watch dies: the mirror still has every write
// the leader has, read from the leader, and its watch is re-created.
func TestMirrorSurvivesItsWatchNode(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster with restarts")
	}
	c := natstest.Start(t, 3)
	_, js := c.Connect()
	b := open(t, js, "t_watch", 3)
	started(t, b)
	_, wjs := c.Connect()
	w := open(t, wjs, "t_watch", 3)
	started(t, w)
	ctx := context.Background()
	var rev uint64
	for i := range 3 {
		leader := c.StreamLeader(StreamName("t_watch"))
		victim := (leader + 1 + i%2) % 3 // a follower: the stream keeps its leader
		if i == 2 {
			victim = leader // and once the leader itself
		}
		c.StopNode(victim)
		var r Result
		var err error
		until(t, "write with a node down", func() bool {
			r, err = w.Write(ctx, fmt.Sprintf("w%d", i), Op{Key: "routes", Value: fmt.Appendf(nil, "[%d]", i), Expect: rev})
			return err == nil
		})
		rev = r.Revision
		took := until(t, "mirror catches up", func() bool { return b.Snapshot().Revision >= rev })
		t.Logf("node %d down (leader was %d): acknowledged write in the other mirror after %v", victim, leader, took)
		c.StartNode(victim)
	}
	until(t, "in sync", func() bool { return b.Health().InSync })
	t.Logf("health: %+v", b.Health())
}
