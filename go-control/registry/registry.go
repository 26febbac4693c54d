// Package registry is Sluice's schema registry: subjects with versioned
// AVRO, PROTOBUF, JSON Schema and TENSOR schemas, global schema ids,
// references, soft and hard deletes, and compatibility levels checked at
// registration. NewHandler serves it over a Confluent-compatible REST API;
// Subscribe feeds every change to the data plane.
package registry

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-ai/sluice/go-control/internal/jsonnum"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// Limits.
const (
	SubjectNameBytesMax = 255 // bytes
	ReferencesMax       = 64  // references per schema
	referenceDepthMax   = 32  // nesting of references
	VersionMax          = 1<<31 - 1
)

// Reference names another subject's version that a schema builds on.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// UnmarshalJSON reads version 3 or 3.0 alike, as Confluent's Jackson does.
func (ref *Reference) UnmarshalJSON(b []byte) error {
	var r struct {
		Name    string       `json:"name"`
		Subject string       `json:"subject"`
		Version *json.Number `json:"version"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	*ref = Reference{Name: r.Name, Subject: r.Subject}
	if r.Version != nil {
		v, err := jsonnum.Int64(*r.Version)
		if err != nil || v < math.MinInt32 || v > math.MaxInt32 {
			return fmt.Errorf("reference version %s is not a version number", *r.Version)
		}
		ref.Version = int(v)
	}
	return nil
}

// SchemaInput is a schema as a client submits it.
type SchemaInput struct {
	Type       compat.Type
	Schema     string
	References []Reference
}

// SchemaInfo is a registered schema, identified by its global id.
type SchemaInfo struct {
	ID         int
	Type       compat.Type
	Schema     string
	References []Reference
}

// SubjectVersion is one version of a subject.
type SubjectVersion struct {
	Subject string
	Version int
	SchemaInfo
	Deleted bool
}

// ChangeKind says what happened to a subject version.
type ChangeKind string

const (
	ChangeRegistered ChangeKind = "registered"
	ChangeRetired    ChangeKind = "retired" // soft delete
	ChangeDeleted    ChangeKind = "deleted" // hard delete
)

// Change describes one subject version after a change: everything the
// data plane needs to validate frames carrying (SchemaID, Version).
type Change struct {
	Kind       ChangeKind
	SchemaID   int
	Subject    string
	Version    int
	Type       compat.Type
	Schema     string
	References []Reference
	// Retired is true when the version may no longer be used by new
	// traffic (soft- or hard-deleted).
	Retired bool
}

// Options tune a Registry.
type Options struct {
	// DefaultCompatibility applies when neither the subject nor the global
	// config sets a level. Zero means BACKWARD, Confluent's default.
	DefaultCompatibility compat.Level
}

type schemaRec struct {
	SchemaInfo
	key    string
	parsed compat.Schema
	rev    uint64
	// contract is the snapshot stored with the schema (contracts/<id>);
	// contractRev is 0 when none is stored (a schema registered before
	// snapshots existed: its contract is computed on load).
	contract    *compat.Contract
	contractRev uint64
}

type versionRec struct {
	version int
	id      int
	deleted bool
	rev     uint64
}

type subjectRec struct {
	name     string
	versions []*versionRec // ascending
	level    compat.Level  // "" when not set
	levelRev uint64
}

// Registry is safe for concurrent use.
type Registry struct {
	store        Store
	defaultLevel compat.Level

	mu        sync.RWMutex
	schemas   map[int]*schemaRec
	byKey     map[string]int
	subjects  map[string]*subjectRec
	global    compat.Level // "" when not set
	globalRev uint64
	nextID    int
	nextIDRev uint64

	notifyMu sync.Mutex // orders deliveries; taken while mu is held
	subsMu   sync.Mutex
	subs     map[int]func(Change)
	subSeq   int
}

// Open loads the registry's state from store. The registry owns the store
// from then on; Close closes it.
func Open(ctx context.Context, store Store, opts Options) (*Registry, error) {
	lvl := opts.DefaultCompatibility
	if lvl == "" {
		lvl = compat.Backward
	}
	if _, ok := compat.ParseLevel(string(lvl)); !ok {
		return nil, fmt.Errorf("registry: invalid default compatibility %q", lvl)
	}
	r := &Registry{
		store: store, defaultLevel: lvl,
		schemas: map[int]*schemaRec{}, byKey: map[string]int{}, subjects: map[string]*subjectRec{},
		nextID: 1, subs: map[int]func(Change){},
	}
	if err := r.load(ctx); err != nil {
		return nil, fmt.Errorf("registry: loading state: %w", err)
	}
	return r, nil
}

// load replaces the in-memory state with the store's. Caller holds mu (or
// owns r exclusively).
func (r *Registry) load(ctx context.Context) error {
	// Parsed schemas whose stored revision did not change are reused: a
	// reload after another writer's change should not re-parse everything.
	known := r.schemas
	r.schemas, r.byKey, r.subjects = map[int]*schemaRec{}, map[string]int{}, map[string]*subjectRec{}
	r.global, r.globalRev, r.nextID, r.nextIDRev = "", 0, 1, 0
	entries, err := r.store.List(ctx, "")
	if err != nil {
		return err
	}
	var schemaEntries []Entry
	contracts := map[int]Entry{}
	for _, e := range entries {
		switch {
		case e.Key == keyNextID:
			var v nextIDVal
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			r.nextID, r.nextIDRev = v.Next, e.Revision
		case e.Key == keyConfigGlobal:
			var v configVal
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			r.global, r.globalRev = v.Compatibility, e.Revision
		case strings.HasPrefix(e.Key, keyConfigSubject):
			name, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(e.Key, keyConfigSubject))
			if err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			var v configVal
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			sub := r.subject(string(name), true)
			sub.level, sub.levelRev = v.Compatibility, e.Revision
		case strings.HasPrefix(e.Key, keySubjects):
			var v versionVal
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			sub := r.subject(v.Subject, true)
			sub.versions = append(sub.versions, &versionRec{version: v.Version, id: v.ID, deleted: v.Deleted, rev: e.Revision})
		case strings.HasPrefix(e.Key, keySchemas):
			schemaEntries = append(schemaEntries, e)
		case strings.HasPrefix(e.Key, keyContracts):
			var v contractVal
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return fmt.Errorf("%s: %w", e.Key, err)
			}
			contracts[v.ID] = e
		}
	}
	for _, sub := range r.subjects {
		sort.Slice(sub.versions, func(i, j int) bool { return sub.versions[i].version < sub.versions[j].version })
	}
	// Schemas in id order, so that referenced schemas (older) parse first.
	for _, e := range schemaEntries {
		var v schemaVal
		if err := json.Unmarshal(e.Value, &v); err != nil {
			return fmt.Errorf("%s: %w", e.Key, err)
		}
		rec := &schemaRec{SchemaInfo: SchemaInfo{ID: v.ID, Type: v.SchemaType, Schema: v.Schema, References: v.References}, rev: e.Revision}
		if old := known[v.ID]; old != nil && old.rev == e.Revision && old.parsed != nil {
			rec.parsed, rec.key = old.parsed, old.key
			r.byKey[rec.key] = rec.ID
		} else if deps, rerr := r.resolveRefs(v.References, 0, map[string]bool{}); rerr == nil {
			// Stored schemas are read as Confluent reads them: leniently
			// where registration is strict (Avro defaults).
			if parsed, err := compat.ParseStored(rec.Type, rec.Schema, deps); err == nil {
				rec.parsed = parsed
				rec.key = identity(rec.Type, parsed, rec.References)
				r.byKey[rec.key] = rec.ID
			}
		}
		if ce, ok := contracts[v.ID]; ok {
			var cv contractVal
			if err := json.Unmarshal(ce.Value, &cv); err != nil {
				return fmt.Errorf("%s: %w", ce.Key, err)
			}
			if cv.CanonicalOmitted && rec.parsed != nil {
				cv.Canonical = compat.CanonicalForm(rec.parsed)
			}
			c := cv.Contract
			rec.contract, rec.contractRev = &c, ce.Revision
		} else if rec.parsed != nil {
			c := compat.NewContract(rec.parsed)
			rec.contract = &c
		}
		r.schemas[rec.ID] = rec
		if rec.ID >= r.nextID {
			r.nextID = rec.ID + 1
		}
	}
	return nil
}

// Close closes the store.
func (r *Registry) Close() error { return r.store.Close() }

// Store is the registry's store (for inspection; writes go through the
// registry).
func (r *Registry) Store() Store { return r.store }

func (r *Registry) subject(name string, create bool) *subjectRec {
	sub := r.subjects[name]
	if sub == nil && create {
		sub = &subjectRec{name: name}
		r.subjects[name] = sub
	}
	return sub
}

func identity(t compat.Type, s compat.Schema, refs []Reference) string {
	var rj []byte
	if len(refs) > 0 { // nil and empty must agree: stored values drop empty lists
		rj, _ = json.Marshal(refs)
	}
	return string(t) + "\x00" + s.Canonical() + "\x00" + string(rj)
}

func validSubject(s string) *Error {
	if s == "" || len(s) > SubjectNameBytesMax || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return errInvalidSubject(s)
	}
	return nil
}

func (sub *subjectRec) live() []*versionRec {
	var out []*versionRec
	if sub == nil {
		return nil
	}
	for _, v := range sub.versions {
		if !v.deleted {
			out = append(out, v)
		}
	}
	return out
}

func (sub *subjectRec) find(version int) *versionRec {
	if sub == nil {
		return nil
	}
	for _, v := range sub.versions {
		if v.version == version {
			return v
		}
	}
	return nil
}

// prepare validates and parses an input schema. Caller holds mu.
func (r *Registry) prepare(in SchemaInput) (compat.Schema, []Reference, error) {
	if in.Type == "" {
		in.Type = compat.Avro
	}
	deps, err := r.resolveRefs(in.References, 0, map[string]bool{})
	if err != nil {
		return nil, nil, errInvalidSchema("Invalid schema: %v", err)
	}
	parsed, err := compat.Parse(in.Type, in.Schema, deps)
	if err != nil {
		return nil, nil, errInvalidSchema("Invalid schema %s: %v", in.Type, err)
	}
	if len(in.References) == 0 {
		return parsed, nil, nil
	}
	// Pin "latest" references to the version they resolved to.
	refs := make([]Reference, len(in.References))
	for i, ref := range in.References {
		v, _ := r.refVersion(ref)
		refs[i] = Reference{Name: ref.Name, Subject: ref.Subject, Version: v.version}
	}
	return parsed, refs, nil
}

func (r *Registry) previous(sub *subjectRec) ([]compat.Version, error) {
	var out []compat.Version
	for _, v := range sub.live() {
		rec := r.schemas[v.id]
		if rec == nil || rec.parsed == nil {
			return nil, errStore(fmt.Errorf("schema %d of subject '%s' version %d cannot be parsed", v.id, sub.name, v.version))
		}
		out = append(out, compat.Version{Version: v.version, Schema: rec.parsed, Text: rec.Schema})
	}
	return out, nil
}

func (r *Registry) info(v *versionRec, subject string) SubjectVersion {
	rec := r.schemas[v.id]
	sv := SubjectVersion{Subject: subject, Version: v.version, Deleted: v.deleted}
	if rec != nil {
		sv.SchemaInfo = rec.SchemaInfo
	}
	return sv
}

func (r *Registry) change(kind ChangeKind, subject string, v *versionRec) Change {
	sv := r.info(v, subject)
	text := sv.Schema
	if rec := r.schemas[v.id]; rec != nil && rec.parsed != nil {
		text = compat.EngineText(rec.parsed, text)
	}
	return Change{Kind: kind, SchemaID: sv.ID, Subject: subject, Version: sv.Version, Type: sv.Type,
		Schema: text, References: sv.References, Retired: kind != ChangeRegistered}
}

// unlockAndNotify releases mu and delivers changes in commit order.
func (r *Registry) unlockAndNotify(changes []Change) {
	if len(changes) == 0 {
		r.mu.Unlock()
		return
	}
	r.notifyMu.Lock()
	r.mu.Unlock()
	defer r.notifyMu.Unlock()
	r.subsMu.Lock()
	fns := make([]func(Change), 0, len(r.subs))
	ids := make([]int, 0, len(r.subs))
	for id := range r.subs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		fns = append(fns, r.subs[id])
	}
	r.subsMu.Unlock()
	for _, c := range changes {
		for _, fn := range fns {
			fn(c)
		}
	}
}

// writeAttempts bounds how often a write is retried after another writer
// on the same store changed it first.
const writeAttempts = 3

// write runs op under the write lock. When the store reports that another
// writer (another registry on a shared store) got there first, it reloads
// the state, notifies what changed, and runs op again.
func (r *Registry) write(ctx context.Context, op func(changes *[]Change) error) error {
	r.mu.Lock()
	var changes []Change
	defer func() { r.unlockAndNotify(changes) }()
	for attempt := 1; ; attempt++ {
		err := op(&changes)
		if err == nil || !errors.Is(err, ErrRevisionMismatch) || attempt == writeAttempts {
			return err
		}
		diff, rerr := r.reload(ctx)
		changes = append(changes, diff...)
		if rerr != nil {
			return errStore(rerr)
		}
	}
}

// Refresh reloads the state from the store and notifies subscribers of
// what other writers changed. A shared store (e.g. JetStream KV) calls it
// from its watch; writes refresh by themselves on conflict.
func (r *Registry) Refresh(ctx context.Context) error {
	r.mu.Lock()
	diff, err := r.reload(ctx)
	r.unlockAndNotify(diff)
	if err != nil {
		return errStore(err)
	}
	return nil
}

// reload replaces the state with the store's and returns the changes
// between the two. On failure the old state stays. Caller holds mu.
func (r *Registry) reload(ctx context.Context) ([]Change, error) {
	type key struct {
		subject string
		version int
	}
	before := map[key]Change{}
	for name, sub := range r.subjects {
		for _, v := range sub.versions {
			c := r.change(ChangeRegistered, name, v)
			c.Retired = v.deleted
			before[key{name, v.version}] = c
		}
	}
	schemas, byKey, subjects := r.schemas, r.byKey, r.subjects
	global, globalRev, nextID, nextIDRev := r.global, r.globalRev, r.nextID, r.nextIDRev
	if err := r.load(ctx); err != nil {
		r.schemas, r.byKey, r.subjects = schemas, byKey, subjects
		r.global, r.globalRev, r.nextID, r.nextIDRev = global, globalRev, nextID, nextIDRev
		return nil, err
	}
	var diff []Change
	for _, name := range r.subjectNames(true) {
		for _, v := range r.subjects[name].versions {
			old, had := before[key{name, v.version}]
			delete(before, key{name, v.version})
			switch {
			case !v.deleted && (!had || old.Retired || old.SchemaID != v.id):
				diff = append(diff, r.change(ChangeRegistered, name, v))
			case v.deleted && (!had || !old.Retired):
				// Also when it was absent: a refresh that read the store in the
				// middle of a multi-key write may have seen it missing.
				diff = append(diff, r.change(ChangeRetired, name, v))
			}
		}
	}
	var gone []Change
	for _, c := range before {
		c.Kind, c.Retired = ChangeDeleted, true
		gone = append(gone, c)
	}
	sort.Slice(gone, func(i, j int) bool {
		if gone[i].Subject != gone[j].Subject {
			return gone[i].Subject < gone[j].Subject
		}
		return gone[i].Version < gone[j].Version
	})
	return append(diff, gone...), nil
}

// Subscribe calls fn first with a ChangeRegistered for every live subject
// version (subject, then version order), then with every change as it is
// committed, in commit order, until cancel is called. fn runs on the
// writer's goroutine: it may read the registry but must not write to it,
// subscribe or cancel.
func (r *Registry) Subscribe(fn func(Change)) (cancel func()) {
	r.mu.Lock()
	var snapshot []Change
	for _, name := range r.subjectNames(false) {
		for _, v := range r.subjects[name].live() {
			snapshot = append(snapshot, r.change(ChangeRegistered, name, v))
		}
	}
	r.notifyMu.Lock()
	r.mu.Unlock()
	for _, c := range snapshot {
		fn(c)
	}
	r.subsMu.Lock()
	r.subSeq++
	id := r.subSeq
	r.subs[id] = fn
	r.subsMu.Unlock()
	r.notifyMu.Unlock()
	return func() {
		r.subsMu.Lock()
		delete(r.subs, id)
		r.subsMu.Unlock()
	}
}

func storeErr(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return errStore(err)
}

func (r *Registry) putJSON(ctx context.Context, key string, v any, expect uint64) (uint64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	return r.store.Put(ctx, key, b, expect)
}

// Register adds in under subject, or returns the existing version when the
// subject already holds the same schema. It returns the global schema id
// and the subject version.
func (r *Registry) Register(ctx context.Context, subject string, in SchemaInput) (id, version int, err error) {
	if e := validSubject(subject); e != nil {
		return 0, 0, e
	}
	err = r.write(ctx, func(changes *[]Change) error {
		var err error
		id, version, err = r.register(ctx, subject, in, changes)
		return err
	})
	return id, version, err
}

func (r *Registry) register(ctx context.Context, subject string, in SchemaInput, changes *[]Change) (int, int, error) {
	parsed, refs, err := r.prepare(in)
	if err != nil {
		return 0, 0, err
	}
	if in.Type == "" {
		in.Type = compat.Avro
	}
	key := identity(in.Type, parsed, refs)
	sub := r.subjects[subject]
	existingID, known := r.byKey[key]
	if known {
		for _, v := range sub.live() {
			if v.id == existingID {
				return v.id, v.version, nil
			}
		}
	}
	if sub != nil {
		prev, err := r.previous(sub)
		if err != nil {
			return 0, 0, err
		}
		level := r.levelFor(subject)
		if res := compat.Check(level, parsed, prev); !res.Compatible() {
			e := newErr(CodeIncompatibleSchema, 409,
				"Schema being registered is incompatible with an earlier schema for subject \"%s\", details: [%s]",
				subject, strings.Join(res.Messages, ", "))
			e.Messages, e.Differences = res.Messages, res.Differences
			return 0, 0, e
		}
	}

	next := 1
	if sub != nil && len(sub.versions) > 0 {
		next = sub.versions[len(sub.versions)-1].version + 1
	}
	if next > VersionMax {
		return 0, 0, errInvalidVersion(fmt.Sprint(next))
	}
	var vrev uint64
	if known {
		rev, err := r.putJSON(ctx, versionKey(subject, next), versionVal{Subject: subject, Version: next, ID: existingID}, 0)
		if err != nil {
			return 0, 0, storeErr(err)
		}
		vrev = rev
	} else {
		// A new id is allocated by the same atomic write that records the
		// version: a registration that fails consumes no id.
		// The contract snapshot is stored with the schema, in the same
		// atomic write.
		newID := r.nextID
		contract := compat.NewContract(parsed)
		cb, err := encodeContract(newID, contract)
		if err != nil {
			return 0, 0, storeErr(err)
		}
		ws := make([]Write, 4)
		for i, kv := range []struct {
			key    string
			v      any
			expect uint64
		}{
			{keyNextID, nextIDVal{Next: newID + 1}, r.nextIDRev},
			{schemaKey(newID), schemaVal{ID: newID, SchemaType: in.Type, Schema: in.Schema, References: refs}, 0},
			{contractKey(newID), json.RawMessage(cb), 0},
			{versionKey(subject, next), versionVal{Subject: subject, Version: next, ID: newID}, 0},
		} {
			b, err := json.Marshal(kv.v)
			if err != nil {
				return 0, 0, storeErr(err)
			}
			ws[i] = Write{Key: kv.key, Value: b, Expect: kv.expect}
		}
		revs, err := r.store.PutAll(ctx, ws)
		if err != nil {
			return 0, 0, storeErr(err)
		}
		r.nextID, r.nextIDRev = newID+1, revs[0]
		info := SchemaInfo{ID: newID, Type: in.Type, Schema: in.Schema, References: refs}
		r.schemas[newID] = &schemaRec{SchemaInfo: info, key: key, parsed: parsed, rev: revs[1], contract: &contract, contractRev: revs[2]}
		r.byKey[key] = newID
		existingID, vrev = newID, revs[3]
	}
	sub = r.subject(subject, true)
	v := &versionRec{version: next, id: existingID, rev: vrev}
	sub.versions = append(sub.versions, v)
	*changes = append(*changes, r.change(ChangeRegistered, subject, v))
	return existingID, next, nil
}
