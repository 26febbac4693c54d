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
	"slices"
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

// Store keys.
const (
	keySchemas       = "schemas/"
	keySubjects      = "subjects/"
	keyConfigGlobal  = "config/global"
	keyConfigSubject = "config/subjects/"
	keyNextID        = "meta/next-id"
	keyContracts     = "contracts/"
)

func subjectKey(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
func schemaKey(id int) string    { return fmt.Sprintf("%s%010d", keySchemas, id) }
func contractKey(id int) string  { return fmt.Sprintf("%s%010d", keyContracts, id) }
func versionKey(s string, v int) string {
	return fmt.Sprintf("%s%s/%010d", keySubjects, subjectKey(s), v)
}

type schemaVal struct {
	ID         int         `json:"id"`
	SchemaType compat.Type `json:"schemaType"`
	Schema     string      `json:"schema"`
	References []Reference `json:"references,omitempty"`
}

type versionVal struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Deleted bool   `json:"deleted"`
}

type configVal struct {
	Compatibility compat.Level `json:"compatibility"`
}

type nextIDVal struct {
	Next int `json:"next"`
}

// contractVal is a stored contract snapshot. The canonical form is left
// out when storing it would pass ContractBytesMax (it is then recomputed
// from the schema, whose fingerprint the snapshot keeps), and the field
// list is cut until the value fits.
type contractVal struct {
	ID int `json:"id"`
	compat.Contract
	CanonicalOmitted bool `json:"canonical_omitted,omitempty"`
}

// ContractBytesMax bounds a stored contract snapshot, in bytes.
const ContractBytesMax = 512 << 10

func encodeContract(id int, c compat.Contract) ([]byte, error) {
	v := contractVal{ID: id, Contract: c}
	b, err := json.Marshal(v)
	if err != nil || len(b) <= ContractBytesMax {
		return b, err
	}
	v.Canonical, v.CanonicalOmitted = "", true
	for {
		if b, err = json.Marshal(v); err != nil || len(b) <= ContractBytesMax || len(v.Fields) == 0 {
			return b, err
		}
		v.Fields, v.FieldsTruncated = v.Fields[:len(v.Fields)/2], true
	}
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

// resolveRefs turns references into parser dependencies, dependencies of
// dependencies first. Caller holds mu.
func (r *Registry) resolveRefs(refs []Reference, depth int, visiting map[string]bool) ([]compat.Dependency, error) {
	if len(refs) > ReferencesMax {
		return nil, fmt.Errorf("%d references, more than the limit of %d", len(refs), ReferencesMax)
	}
	if depth > referenceDepthMax {
		return nil, fmt.Errorf("references nested deeper than %d", referenceDepthMax)
	}
	var deps []compat.Dependency
	seen := map[string]bool{}
	for _, ref := range refs {
		if ref.Name == "" {
			return nil, errors.New("reference without a name")
		}
		v, err := r.refVersion(ref)
		if err != nil {
			return nil, err
		}
		rec := r.schemas[v.id]
		if rec == nil {
			return nil, fmt.Errorf("reference %q: schema %d missing", ref.Name, v.id)
		}
		k := fmt.Sprintf("%s\x00%d", ref.Subject, v.version)
		if visiting[k] {
			return nil, fmt.Errorf("reference cycle through subject '%s' version %d", ref.Subject, v.version)
		}
		visiting[k] = true
		sub, err := r.resolveRefs(rec.References, depth+1, visiting)
		delete(visiting, k)
		if err != nil {
			return nil, err
		}
		for _, d := range append(sub, compat.Dependency{Name: ref.Name, Schema: rec.Schema}) {
			if !seen[d.Name] {
				seen[d.Name] = true
				deps = append(deps, d)
			}
		}
	}
	return deps, nil
}

func (r *Registry) refVersion(ref Reference) (*versionRec, error) {
	sub := r.subjects[ref.Subject]
	var v *versionRec
	if ref.Version == -1 {
		if live := sub.live(); len(live) > 0 {
			v = live[len(live)-1]
		}
	} else {
		v = sub.find(ref.Version)
	}
	if v == nil {
		return nil, fmt.Errorf("reference %q: subject '%s' version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	return v, nil
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

func (r *Registry) levelFor(subject string) compat.Level {
	if sub := r.subjects[subject]; sub != nil && sub.level != "" {
		return sub.level
	}
	if r.global != "" {
		return r.global
	}
	return r.defaultLevel
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

// Lookup finds the version of subject that holds in.
func (r *Registry) Lookup(subject string, in SchemaInput, deleted bool) (SubjectVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sub := r.subjects[subject]
	if sub == nil || (len(sub.live()) == 0 && !(deleted && len(sub.versions) > 0)) {
		return SubjectVersion{}, errSubjectNotFound(subject)
	}
	parsed, refs, err := r.prepare(in)
	if err != nil {
		return SubjectVersion{}, err
	}
	if in.Type == "" {
		in.Type = compat.Avro
	}
	id, ok := r.byKey[identity(in.Type, parsed, refs)]
	if ok {
		for i := len(sub.versions) - 1; i >= 0; i-- {
			v := sub.versions[i]
			if v.id == id && (!v.deleted || deleted) {
				return r.info(v, subject), nil
			}
		}
	}
	return SubjectVersion{}, errSchemaNotFound()
}

func (r *Registry) subjectNames(deleted bool) []string {
	var out []string
	for name, sub := range r.subjects {
		if len(sub.live()) > 0 || (deleted && len(sub.versions) > 0) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Subjects lists subjects with a live version (any version if deleted).
func (r *Registry) Subjects(deleted bool) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.subjectNames(deleted)
}

// Versions lists a subject's version numbers.
func (r *Registry) Versions(subject string, deleted bool) ([]int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sub := r.subjects[subject]
	var out []int
	if sub != nil {
		for _, v := range sub.versions {
			if !v.deleted || deleted {
				out = append(out, v.version)
			}
		}
	}
	if len(out) == 0 {
		return nil, errSubjectNotFound(subject)
	}
	return out, nil
}

// Latest is the version argument meaning "the newest live version".
const Latest = -1

// Version returns one version of subject; version may be Latest.
func (r *Registry) Version(subject string, version int, deleted bool) (SubjectVersion, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, err := r.lookupVersion(subject, version, deleted)
	if err != nil {
		return SubjectVersion{}, err
	}
	return r.info(v, subject), nil
}

func (r *Registry) lookupVersion(subject string, version int, deleted bool) (*versionRec, error) {
	sub := r.subjects[subject]
	if sub == nil || (len(sub.live()) == 0 && !(deleted && len(sub.versions) > 0)) {
		return nil, errSubjectNotFound(subject)
	}
	if version == Latest {
		pool := sub.live()
		if deleted {
			pool = sub.versions
		}
		if len(pool) == 0 {
			return nil, errVersionNotFound(version)
		}
		return pool[len(pool)-1], nil
	}
	v := sub.find(version)
	if v == nil || (v.deleted && !deleted) {
		return nil, errVersionNotFound(version)
	}
	return v, nil
}

// SchemaByID returns a schema by its global id.
func (r *Registry) SchemaByID(id int) (SchemaInfo, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rec := r.schemas[id]
	if rec == nil {
		return SchemaInfo{}, errSchemaIDNotFound(id)
	}
	return rec.SchemaInfo, nil
}

// SubjectVersionRef names a subject version.
type SubjectVersionRef struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// VersionsByID lists the subject versions holding schema id.
func (r *Registry) VersionsByID(id int, deleted bool) ([]SubjectVersionRef, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.schemas[id] == nil {
		return nil, errSchemaIDNotFound(id)
	}
	out := []SubjectVersionRef{}
	for _, name := range r.subjectNames(true) {
		for _, v := range r.subjects[name].versions {
			if v.id == id && (!v.deleted || deleted) {
				out = append(out, SubjectVersionRef{Subject: name, Version: v.version})
			}
		}
	}
	return out, nil
}

// ReferencedBy lists the ids of schemas that reference subject version.
func (r *Registry) ReferencedBy(subject string, version int) ([]int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, err := r.lookupVersion(subject, version, false)
	if err != nil {
		return nil, err
	}
	out := []int{}
	for _, by := range r.referrers(subject, v.version, true) {
		if !slices.Contains(out, by.id) {
			out = append(out, by.id)
		}
	}
	sort.Ints(out)
	return out, nil
}

type referrer struct {
	subject string
	version int
	id      int
}

// referrers lists subject versions whose schema references subject@version.
func (r *Registry) referrers(subject string, version int, liveOnly bool) []referrer {
	var out []referrer
	for name, sub := range r.subjects {
		for _, v := range sub.versions {
			if liveOnly && v.deleted {
				continue
			}
			rec := r.schemas[v.id]
			if rec == nil {
				continue
			}
			for _, ref := range rec.References {
				if ref.Subject == subject && ref.Version == version {
					out = append(out, referrer{subject: name, version: v.version, id: v.id})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].subject != out[j].subject {
			return out[i].subject < out[j].subject
		}
		return out[i].version < out[j].version
	})
	return out
}

func (r *Registry) checkUnreferenced(subject string, version int, liveOnly bool) *Error {
	refs := r.referrers(subject, version, liveOnly)
	if len(refs) == 0 {
		return nil
	}
	var by []string
	for _, x := range refs {
		by = append(by, fmt.Sprintf("%s/%d", x.subject, x.version))
	}
	return errReferenceExists(subject, version, by)
}

// DeleteSubject soft-deletes every live version of subject, or, with
// permanent, removes a soft-deleted subject for good. It returns the
// versions affected.
func (r *Registry) DeleteSubject(ctx context.Context, subject string, permanent bool) (versions []int, err error) {
	err = r.write(ctx, func(changes *[]Change) error {
		var err error
		versions, err = r.deleteSubject(ctx, subject, permanent, changes)
		return err
	})
	return versions, err
}

func (r *Registry) deleteSubject(ctx context.Context, subject string, permanent bool, changes *[]Change) ([]int, error) {
	sub := r.subjects[subject]
	if sub == nil || len(sub.versions) == 0 {
		return nil, errSubjectNotFound(subject)
	}
	live := sub.live()
	var out []int
	if !permanent {
		if len(live) == 0 {
			return nil, errSubjectSoftDeleted(subject)
		}
		for _, v := range live {
			if e := r.checkUnreferenced(subject, v.version, true); e != nil {
				return nil, e
			}
		}
		for _, v := range live {
			if err := r.retire(ctx, subject, v); err != nil {
				return out, err
			}
			out = append(out, v.version)
			*changes = append(*changes, r.change(ChangeRetired, subject, v))
		}
		return out, nil
	}
	if len(live) > 0 {
		return nil, errSubjectNotSoftDeleted(subject)
	}
	for _, v := range sub.versions {
		if e := r.checkUnreferenced(subject, v.version, false); e != nil {
			return nil, e
		}
	}
	for _, v := range slices.Clone(sub.versions) {
		c := r.change(ChangeDeleted, subject, v)
		if err := r.remove(ctx, sub, v); err != nil {
			return out, err
		}
		out = append(out, v.version)
		*changes = append(*changes, c)
	}
	if sub.levelRev != 0 {
		if err := r.store.Delete(ctx, keyConfigSubject+subjectKey(subject), sub.levelRev); err != nil && !errors.Is(err, ErrNotFound) {
			return out, storeErr(err)
		}
	}
	delete(r.subjects, subject)
	return out, nil
}

func (r *Registry) retire(ctx context.Context, subject string, v *versionRec) error {
	rev, err := r.putJSON(ctx, versionKey(subject, v.version), versionVal{Subject: subject, Version: v.version, ID: v.id, Deleted: true}, v.rev)
	if err != nil {
		return storeErr(err)
	}
	v.deleted, v.rev = true, rev
	return nil
}

// remove hard-deletes a version and drops its schema when nothing else
// holds it. Schema ids are never reused: the id counter only grows.
func (r *Registry) remove(ctx context.Context, sub *subjectRec, v *versionRec) error {
	if err := r.store.Delete(ctx, versionKey(sub.name, v.version), v.rev); err != nil {
		return storeErr(err)
	}
	sub.versions = slices.DeleteFunc(sub.versions, func(x *versionRec) bool { return x == v })
	for _, other := range r.subjects {
		for _, ov := range other.versions {
			if ov.id == v.id {
				return nil
			}
		}
	}
	rec := r.schemas[v.id]
	if rec == nil {
		return nil
	}
	if err := r.store.Delete(ctx, schemaKey(rec.ID), rec.rev); err != nil && !errors.Is(err, ErrNotFound) {
		return storeErr(err)
	}
	if rec.contractRev != 0 {
		if err := r.store.Delete(ctx, contractKey(rec.ID), rec.contractRev); err != nil && !errors.Is(err, ErrNotFound) {
			return storeErr(err)
		}
	}
	delete(r.schemas, rec.ID)
	if r.byKey[rec.key] == rec.ID {
		delete(r.byKey, rec.key)
	}
	return nil
}

// DeleteVersion soft-deletes one version, or with permanent removes a
// soft-deleted one. version may be Latest.
func (r *Registry) DeleteVersion(ctx context.Context, subject string, version int, permanent bool) (deleted int, err error) {
	err = r.write(ctx, func(changes *[]Change) error {
		var err error
		deleted, err = r.deleteVersion(ctx, subject, version, permanent, changes)
		return err
	})
	return deleted, err
}

func (r *Registry) deleteVersion(ctx context.Context, subject string, version int, permanent bool, changes *[]Change) (int, error) {
	sub := r.subjects[subject]
	if sub == nil || len(sub.versions) == 0 {
		return 0, errSubjectNotFound(subject)
	}
	var v *versionRec
	if version == Latest {
		pool := sub.live()
		if permanent {
			pool = sub.versions
		}
		if len(pool) > 0 {
			v = pool[len(pool)-1]
		}
	} else {
		v = sub.find(version)
	}
	if v == nil {
		return 0, errVersionNotFound(version)
	}
	if !permanent {
		if v.deleted {
			return 0, errVersionSoftDeleted(subject, v.version)
		}
		if e := r.checkUnreferenced(subject, v.version, true); e != nil {
			return 0, e
		}
		if err := r.retire(ctx, subject, v); err != nil {
			return 0, err
		}
		*changes = append(*changes, r.change(ChangeRetired, subject, v))
		return v.version, nil
	}
	if !v.deleted {
		return 0, errVersionNotSoftDeleted(subject, v.version)
	}
	if e := r.checkUnreferenced(subject, v.version, false); e != nil {
		return 0, e
	}
	c := r.change(ChangeDeleted, subject, v)
	if err := r.remove(ctx, sub, v); err != nil {
		return 0, err
	}
	*changes = append(*changes, c)
	return v.version, nil
}

// CheckCompatibility tests in against one version of subject (version >= 1
// or Latest) or, with allVersions, against the versions the subject's level
// requires. The result carries the Confluent-style messages and the
// differences they come from; no messages means compatible.
func (r *Registry) CheckCompatibility(subject string, version int, allVersions bool, in SchemaInput) (compat.Result, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	parsed, _, err := r.prepare(in)
	if err != nil {
		return compat.Result{}, err
	}
	level := r.levelFor(subject)
	sub := r.subjects[subject]
	var prev []compat.Version
	if allVersions {
		if sub != nil {
			if prev, err = r.previous(sub); err != nil {
				return compat.Result{}, err
			}
		}
	} else {
		v, err := r.lookupVersion(subject, version, false)
		if err != nil {
			return compat.Result{}, err
		}
		rec := r.schemas[v.id]
		if rec == nil || rec.parsed == nil {
			return compat.Result{}, errStore(fmt.Errorf("schema %d cannot be parsed", v.id))
		}
		prev = []compat.Version{{Version: v.version, Schema: rec.parsed, Text: rec.Schema}}
	}
	return compat.Check(level, parsed, prev), nil
}

// Compatibility returns the level set for subject ("" = global). ok is
// false when subject has no level of its own.
func (r *Registry) Compatibility(subject string) (level compat.Level, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if subject == "" {
		if r.global != "" {
			return r.global, true
		}
		return r.defaultLevel, true
	}
	if sub := r.subjects[subject]; sub != nil && sub.level != "" {
		return sub.level, true
	}
	return r.levelFor(subject), false
}

// SetCompatibility sets the level of subject ("" = global).
func (r *Registry) SetCompatibility(ctx context.Context, subject string, level compat.Level) error {
	if _, ok := compat.ParseLevel(string(level)); !ok {
		return errInvalidLevel()
	}
	return r.write(ctx, func(*[]Change) error { return r.setCompatibility(ctx, subject, level) })
}

func (r *Registry) setCompatibility(ctx context.Context, subject string, level compat.Level) error {
	if subject == "" {
		rev, err := r.putJSON(ctx, keyConfigGlobal, configVal{Compatibility: level}, r.globalRev)
		if err != nil {
			return storeErr(err)
		}
		r.global, r.globalRev = level, rev
		return nil
	}
	if e := validSubject(subject); e != nil {
		return e
	}
	sub := r.subject(subject, true)
	rev, err := r.putJSON(ctx, keyConfigSubject+subjectKey(subject), configVal{Compatibility: level}, sub.levelRev)
	if err != nil {
		return storeErr(err)
	}
	sub.level, sub.levelRev = level, rev
	return nil
}

// DeleteCompatibility removes subject's own level (or resets the global
// one to the default) and returns the level it had.
func (r *Registry) DeleteCompatibility(ctx context.Context, subject string) (prev compat.Level, err error) {
	err = r.write(ctx, func(*[]Change) error {
		var err error
		prev, err = r.deleteCompatibility(ctx, subject)
		return err
	})
	return prev, err
}

func (r *Registry) deleteCompatibility(ctx context.Context, subject string) (compat.Level, error) {
	if subject == "" {
		prev := r.global
		if prev == "" {
			prev = r.defaultLevel
		}
		if r.globalRev != 0 {
			if err := r.store.Delete(ctx, keyConfigGlobal, r.globalRev); err != nil {
				return "", storeErr(err)
			}
		}
		r.global, r.globalRev = "", 0
		return prev, nil
	}
	sub := r.subjects[subject]
	if sub == nil || sub.level == "" {
		return "", errSubjectConfigNotSet(subject)
	}
	if err := r.store.Delete(ctx, keyConfigSubject+subjectKey(subject), sub.levelRev); err != nil {
		return "", storeErr(err)
	}
	prev := sub.level
	sub.level, sub.levelRev = "", 0
	if len(sub.versions) == 0 {
		delete(r.subjects, subject)
	}
	return prev, nil
}
