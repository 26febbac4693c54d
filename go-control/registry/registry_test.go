package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

var ctx = context.Background()

func TestBoltPersistsAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() *Registry {
		t.Helper()
		st, err := OpenBoltStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := Open(ctx, st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	reg := open()
	if err := reg.SetCompatibility(ctx, "", compat.FullTransitive); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetCompatibility(ctx, "loose", compat.None); err != nil {
		t.Fatal(err)
	}
	money := "syntax = \"proto3\";\npackage common;\nmessage Money { int64 cents = 1; }\n"
	order := "syntax = \"proto3\";\nimport \"money.proto\";\nmessage Order { common.Money price = 1; }\n"
	mustRegister(t, reg, "money", SchemaInput{Type: compat.Protobuf, Schema: money}, 1, 1)
	mustRegister(t, reg, "order", SchemaInput{Type: compat.Protobuf, Schema: order,
		References: []Reference{{Name: "money.proto", Subject: "money", Version: Latest}}}, 2, 1)
	mustRegister(t, reg, "s", SchemaInput{Type: compat.Avro, Schema: avroV1}, 3, 1)
	mustRegister(t, reg, "s", SchemaInput{Type: compat.Avro, Schema: avroV2}, 4, 2)
	mustRegister(t, reg, "gone", SchemaInput{Type: compat.JSON, Schema: `{"type":"string"}`}, 5, 1)
	if _, err := reg.DeleteVersion(ctx, "s", 2, false); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.DeleteSubject(ctx, "gone", false); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.DeleteSubject(ctx, "gone", true); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	if _, err := os.Stat(filepath.Join(dir, BoltFileName)); err != nil {
		t.Fatal(err)
	}

	reg = open()
	defer reg.Close()
	if got := reg.Subjects(false); strings.Join(got, ",") != "money,order,s" {
		t.Fatalf("subjects after reopen: %v", got)
	}
	if l, _ := reg.Compatibility(""); l != compat.FullTransitive {
		t.Fatalf("global level after reopen: %s", l)
	}
	if l, own := reg.Compatibility("loose"); l != compat.None || !own {
		t.Fatalf("subject level after reopen: %s %v", l, own)
	}
	sv, err := reg.Version("order", Latest, false)
	if err != nil || sv.ID != 2 || len(sv.References) != 1 || sv.References[0].Version != 1 {
		t.Fatalf("order after reopen (latest reference pinned to 1): %+v %v", sv, err)
	}
	if _, err := reg.Version("s", 2, false); err == nil {
		t.Fatal("soft-deleted version visible after reopen")
	}
	if sv, err := reg.Version("s", 2, true); err != nil || !sv.Deleted || sv.ID != 4 {
		t.Fatalf("soft-deleted version lost: %+v %v", sv, err)
	}
	if _, err := reg.SchemaByID(5); err == nil {
		t.Fatal("hard-deleted schema back after reopen")
	}
	// Identity survives: the same text maps to the same id, and new ids
	// continue after the highest ever issued (5), not after the highest left.
	mustRegister(t, reg, "s2", SchemaInput{Type: compat.Avro, Schema: avroV1}, 3, 1)
	mustRegister(t, reg, "new", SchemaInput{Type: compat.JSON, Schema: `{"type":"number"}`}, 6, 1)
	// Compatibility still checks against the reloaded, parsed schemas.
	_, _, err = reg.Register(ctx, "s", SchemaInput{Type: compat.Avro, Schema: avroV3})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIncompatibleSchema {
		t.Fatalf("incompatible after reopen: %v", err)
	}
}

func mustRegister(t *testing.T, reg *Registry, subject string, in SchemaInput, wantID, wantVersion int) {
	t.Helper()
	id, v, err := reg.Register(ctx, subject, in)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	if id != wantID || v != wantVersion {
		t.Fatalf("register %s: id %d version %d, want %d/%d", subject, id, v, wantID, wantVersion)
	}
}

func TestSubscribeReplaysThenStreams(t *testing.T) {
	reg, err := Open(ctx, NewMemoryStore(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	sig := `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`
	mustRegister(t, reg, "mlp", SchemaInput{Type: compat.Tensor, Schema: sig}, 1, 1)

	var mu sync.Mutex
	var got []Change
	cancel := reg.Subscribe(func(c Change) {
		// Reading the registry from a callback must not deadlock.
		reg.Subjects(true)
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
	})
	sig2 := strings.Replace(sig, `[-1,4]`, `[-1,-1]`, 1)
	mustRegister(t, reg, "mlp", SchemaInput{Type: compat.Tensor, Schema: sig2}, 2, 2)
	mustRegister(t, reg, "mlp", SchemaInput{Type: compat.Tensor, Schema: sig2}, 2, 2) // no change
	if _, err := reg.DeleteVersion(ctx, "mlp", 1, false); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.DeleteVersion(ctx, "mlp", 1, true); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := reg.DeleteSubject(ctx, "mlp", false); err != nil {
		t.Fatal(err)
	}

	want := []Change{
		{Kind: ChangeRegistered, SchemaID: 1, Subject: "mlp", Version: 1, Type: compat.Tensor, Schema: sig},
		{Kind: ChangeRegistered, SchemaID: 2, Subject: "mlp", Version: 2, Type: compat.Tensor, Schema: sig2},
		{Kind: ChangeRetired, SchemaID: 1, Subject: "mlp", Version: 1, Type: compat.Tensor, Schema: sig, Retired: true},
		{Kind: ChangeDeleted, SchemaID: 1, Subject: "mlp", Version: 1, Type: compat.Tensor, Schema: sig, Retired: true},
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Fatalf("changes:\n got %+v\nwant %+v", got, want)
	}
}

func TestConcurrentRegistrationsGetDistinctVersions(t *testing.T) {
	reg, err := Open(ctx, NewMemoryStore(), Options{DefaultCompatibility: compat.None})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	const writers = 8
	var wg sync.WaitGroup
	ids := make([]int, writers)
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			schema := fmt.Sprintf(`{"type":"record","name":"R%d","fields":[]}`, i)
			ids[i], _, errs[i] = reg.Register(ctx, "shared", SchemaInput{Type: compat.Avro, Schema: schema})
			reg.Subjects(false)
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range writers {
		if errs[i] != nil || seen[ids[i]] {
			t.Fatalf("writer %d: id %d err %v", i, ids[i], errs[i])
		}
		seen[ids[i]] = true
	}
	vs, err := reg.Versions("shared", false)
	if err != nil || len(vs) != writers || vs[writers-1] != writers {
		t.Fatalf("versions: %v %v", vs, err)
	}
}

func TestInputLimits(t *testing.T) {
	reg, err := Open(ctx, NewMemoryStore(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	var e *Error
	for _, subject := range []string{"", strings.Repeat("s", SubjectNameBytesMax+1), "bad\x00name", string([]byte{0xff})} {
		_, _, err := reg.Register(ctx, subject, SchemaInput{Type: compat.Avro, Schema: avroV1})
		if !errors.As(err, &e) || e.Code != CodeInvalidSubject {
			t.Fatalf("subject %q: %v", subject, err)
		}
	}
	// A self-reference cycle cannot be built (the referenced version must
	// exist first), but a missing or over-long reference list is refused.
	refs := make([]Reference, ReferencesMax+1)
	_, _, err = reg.Register(ctx, "s", SchemaInput{Type: compat.Avro, Schema: avroV1, References: refs})
	if !errors.As(err, &e) || e.Code != CodeInvalidSchema || !strings.Contains(e.Message, "limit") {
		t.Fatalf("too many references: %v", err)
	}
	if _, err := Open(ctx, NewMemoryStore(), Options{DefaultCompatibility: "SIDEWAYS"}); err == nil {
		t.Fatal("bogus default level accepted")
	}
	if err := reg.SetCompatibility(ctx, "s", "SIDEWAYS"); !errors.As(err, &e) || e.Code != CodeInvalidCompatibilityLevel {
		t.Fatalf("bogus level: %v", err)
	}
}

// A failing store surfaces as error 50001 and leaves memory unchanged.
type failingStore struct {
	Store
	fail bool
	err  error // nil: a plain failure
}

func (f *failingStore) failure() error {
	if f.err != nil {
		return f.err
	}
	return errors.New("disk on fire")
}

func (f *failingStore) PutAll(ctx context.Context, ws []Write) ([]uint64, error) {
	if f.fail {
		return nil, f.failure()
	}
	return f.Store.PutAll(ctx, ws)
}

func (f *failingStore) Put(ctx context.Context, key string, value []byte, expect uint64) (uint64, error) {
	if f.fail {
		return 0, f.failure()
	}
	return f.Store.Put(ctx, key, value, expect)
}

func TestStoreFailureIs50001(t *testing.T) {
	fs := &failingStore{Store: NewMemoryStore()}
	reg, err := Open(ctx, fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	fs.fail = true
	_, _, err = reg.Register(ctx, "s", SchemaInput{Type: compat.Avro, Schema: avroV1})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeStoreError || e.Status != 500 {
		t.Fatalf("store failure: %v", err)
	}
	if len(reg.Subjects(true)) != 0 {
		t.Fatal("failed registration left a subject behind")
	}
	// A shared store's outcomes keep their meaning: unknown is 504, a
	// refusal before writing 503; neither consumed an id.
	for _, c := range []struct {
		err    error
		status int
	}{{ErrOutcomeUnknown, 504}, {ErrUnavailable, 503}} {
		fs.err = fmt.Errorf("%w: test", c.err)
		_, _, err = reg.Register(ctx, "s", SchemaInput{Type: compat.Avro, Schema: avroV1})
		if !errors.As(err, &e) || e.Status != c.status {
			t.Fatalf("store %v: %v", c.err, err)
		}
	}
	fs.fail = false
	mustRegister(t, reg, "s", SchemaInput{Type: compat.Avro, Schema: avroV1}, 1, 1)
}

// Two registries on one store stand for two appliances sharing a KV
// bucket: each write is a compare-and-set, a stale writer reloads and
// retries, and Refresh reports what the other one changed.
func TestTwoRegistriesShareOneStore(t *testing.T) {
	store := NewMemoryStore()
	a, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seenA, seenB []string
	record := func(dst *[]string) func(Change) {
		return func(c Change) {
			mu.Lock()
			*dst = append(*dst, fmt.Sprintf("%s %s/%d id=%d", c.Kind, c.Subject, c.Version, c.SchemaID))
			mu.Unlock()
		}
	}
	a.Subscribe(record(&seenA))
	b.Subscribe(record(&seenB))

	mustRegister(t, a, "s", SchemaInput{Type: compat.Avro, Schema: avroV1}, 1, 1)
	// b is stale: its id allocation conflicts, it reloads (learning s/1)
	// and retries.
	mustRegister(t, b, "t", SchemaInput{Type: compat.JSON, Schema: `{"type":"string"}`}, 2, 1)
	mustRegister(t, b, "s", SchemaInput{Type: compat.Avro, Schema: avroV2}, 3, 2)
	// a only knows s/1, against which avroV3 would also fail; use a schema
	// compatible with v1 but not with v2 (tag changes type) to prove the
	// retry checks against the real latest version.
	v1ok := `{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"},{"name":"tag","type":"int","default":0}]}`
	_, _, err = a.Register(ctx, "s", SchemaInput{Type: compat.Avro, Schema: v1ok})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIncompatibleSchema || !strings.Contains(e.Message, "{oldSchemaVersion: 2}") {
		t.Fatalf("stale writer: want 409 against version 2, got %v", err)
	}
	if _, err := b.DeleteSubject(ctx, "s", false); err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Subjects(false); strings.Join(got, ",") != "t" {
		t.Fatalf("a after refresh: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	// a learns b's writes in one reload, reported in subject order.
	wantA := "registered s/1 id=1,registered s/2 id=3,registered t/1 id=2,retired s/1 id=1,retired s/2 id=3"
	wantB := "registered s/1 id=1,registered t/1 id=2,registered s/2 id=3,retired s/1 id=1,retired s/2 id=3"
	if strings.Join(seenA, ",") != wantA {
		t.Errorf("a saw %v\nwant %s", seenA, wantA)
	}
	if strings.Join(seenB, ",") != wantB {
		t.Errorf("b saw %v\nwant %s", seenB, wantB)
	}
}
