package natsstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/registry"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
	"github.com/sluice-ai/sluice/go-control/registry/storetest"
)

// startServer runs a real nats-server with JetStream on a loopback port.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func connect(t *testing.T, srv *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestContract(t *testing.T) {
	srv := startServer(t)
	s, err := Open(context.Background(), connect(t, srv), "contract", 1)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Contract(t, s)
}

// Two appliances, each with its own connection and registry, share one
// bucket: ids stay global, a stale writer retries, and each one's
// subscribers hear of the other's registrations through Watch + Refresh.
func TestTwoAppliancesShareABucket(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := startServer(t)
	open := func() *registry.Registry {
		t.Helper()
		st, err := Open(ctx, connect(t, srv), "", 1)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := registry.Open(ctx, st, registry.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Watch(ctx, func() { reg.Refresh(ctx) }); err != nil {
			t.Fatal(err)
		}
		return reg
	}
	a, b := open(), open()

	var mu sync.Mutex
	seenB := map[string]bool{}
	b.Subscribe(func(c registry.Change) {
		mu.Lock()
		seenB[fmt.Sprintf("%s %s/%d id=%d", c.Kind, c.Subject, c.Version, c.SchemaID)] = true
		mu.Unlock()
	})

	sig := `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`
	idA, vA, err := a.Register(ctx, "mlp", registry.SchemaInput{Type: compat.Tensor, Schema: sig})
	if err != nil || idA != 1 || vA != 1 {
		t.Fatalf("a registers: %d %d %v", idA, vA, err)
	}
	// b hears of it through the bucket watch.
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seenB["registered mlp/1 id=1"]
	})
	// The contract snapshot a stored with the schema is b's too: it comes
	// from the bucket, not recomputed.
	_, ca, err := a.Contract("mlp", 1, false)
	if err != nil {
		t.Fatal(err)
	}
	_, cb, err := b.Contract("mlp", 1, false)
	if err != nil || cb.Fingerprint != ca.Fingerprint || cb.Signature == nil || len(cb.Fields) != 2 {
		t.Fatalf("b's contract %+v, a's %+v (%v)", cb, ca, err)
	}
	if e, err := a.Store().Get(ctx, "contracts/0000000001"); err != nil || !strings.Contains(string(e.Value), ca.Fingerprint) {
		t.Fatalf("snapshot in the bucket: %s %v", e.Value, err)
	}
	// The same signature under another subject on b: same global id.
	if id, _, err := b.Register(ctx, "mlp-copy", registry.SchemaInput{Type: compat.Tensor, Schema: sig}); err != nil || id != 1 {
		t.Fatalf("b registers the same schema: id %d %v", id, err)
	}
	// An incompatible change on b is refused against a's version.
	bad := `{"inputs":[{"name":"x","dtype":"f16","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`
	_, _, err = b.Register(ctx, "mlp", registry.SchemaInput{Type: compat.Tensor, Schema: bad})
	var e *registry.Error
	if !errors.As(err, &e) || e.Code != registry.CodeIncompatibleSchema {
		t.Fatalf("incompatible on b: %v", err)
	}
	// a retires its version; b's data plane hears it.
	if _, err := a.DeleteSubject(ctx, "mlp", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seenB["retired mlp/1 id=1"]
	})
	if got := b.Subjects(false); len(got) != 1 || got[0] != "mlp-copy" {
		t.Fatalf("b's subjects: %v", got)
	}
}

// waitFor polls cond: the watch is asynchronous by nature. The bound only
// prevents a hang; no timing is asserted.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not reached")
}

// Registrations racing on two appliances: each id is allocated by exactly
// one successful registration, so the ids are 1..n with no gap.
func TestIDsOnlyFromSuccessfulRegistrations(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t)
	var regs []*registry.Registry
	for range 2 {
		st, err := Open(ctx, connect(t, srv), "ids", 1)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := registry.Open(ctx, st, registry.Options{})
		if err != nil {
			t.Fatal(err)
		}
		regs = append(regs, reg)
	}
	const each = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	ids := map[int]string{}
	failed := 0
	for a, reg := range regs {
		for i := range each {
			wg.Go(func() {
				subject := fmt.Sprintf("s-%d-%d", a, i)
				sig := fmt.Sprintf(`{"inputs":[{"name":"x%d_%d","dtype":"f32","shape":[-1,4]}]}`, a, i)
				for {
					id, _, err := reg.Register(ctx, subject, registry.SchemaInput{Type: compat.Tensor, Schema: sig})
					var e *registry.Error
					if errors.As(err, &e) && e.Status == 503 {
						mu.Lock()
						failed++ // lost the race three times: refused, retried here
						mu.Unlock()
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if other, dup := ids[id]; dup {
						t.Errorf("id %d given to %s and %s", id, other, subject)
					}
					ids[id] = subject
					mu.Unlock()
					return
				}
			})
		}
	}
	wg.Wait()
	for id := 1; id <= 2*each; id++ {
		if _, ok := ids[id]; !ok {
			t.Errorf("id %d unused: ids %v (%d refused attempts)", id, ids, failed)
		}
	}
	t.Logf("%d registrations, %d refused after losing every retry", len(ids), failed)
}
