package compat

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

func rec(name string, fields ...string) string {
	return `{"type":"record","name":"` + name + `","fields":[` + strings.Join(fields, ",") + `]}`
}

func recNS(ns, name string, fields ...string) string {
	return `{"type":"record","name":"` + name + `","namespace":"` + ns + `","fields":[` + strings.Join(fields, ",") + `]}`
}

// Avro cases, derived from Apache Avro's SchemaCompatibility (the checker
// Confluent runs): changes lists what the new schema, as reader, finds in
// data of the old one.
func TestAvroDiff(t *testing.T) {
	id := `{"name":"id","type":"int"}`
	name := `{"name":"name","type":"string"}`
	kind := func(syms string, def string) string {
		return `{"name":"kind","type":{"type":"enum","name":"Kind","symbols":[` + syms + `]` + def + `}}`
	}
	runCompare(t, Avro, []cmpCase{
		{name: "identical", old: rec("U", id, name), new: rec("U", id, name), ok: true, fwd: "ok"},
		{name: "field added with default", old: rec("U", id), new: rec("U", id, `{"name":"e","type":"string","default":""}`),
			changes: []string{"FIELD_ADDED /fields/e"}, ok: true, fwd: "ok"},
		{name: "field added without default", old: rec("U", id), new: rec("U", id, `{"name":"e","type":"string"}`),
			changes: []string{"READER_FIELD_MISSING_DEFAULT_VALUE /fields/e"}, fwd: "ok"},
		{name: "field removed", old: rec("U", id, name), new: rec("U", id), changes: []string{"FIELD_REMOVED /fields/name"}, ok: true, fwd: "breaking"},
		{name: "field with null default added", old: rec("U", id), new: rec("U", id, `{"name":"e","type":["null","string"],"default":null}`),
			changes: []string{"FIELD_ADDED /fields/e"}, ok: true},
		{name: "field renamed with an alias", old: rec("U", id, name), new: rec("U", id, `{"name":"full","aliases":["name"],"type":"string"}`),
			changes: []string{"FIELD_RENAMED /fields/full"}, ok: true, fwd: "breaking"},
		{name: "int promoted to long", old: rec("U", id), new: rec("U", `{"name":"id","type":"long"}`),
			changes: []string{"TYPE_PROMOTED /fields/id/type"}, ok: true, fwd: "breaking"},
		{name: "float promoted to double", old: rec("U", `{"name":"x","type":"float"}`), new: rec("U", `{"name":"x","type":"double"}`),
			changes: []string{"TYPE_PROMOTED /fields/x/type"}, ok: true},
		{name: "string to bytes", old: rec("U", name), new: rec("U", `{"name":"name","type":"bytes"}`), changes: []string{"TYPE_PROMOTED /fields/name/type"}, ok: true, fwd: "ok"},
		{name: "int to string", old: rec("U", id), new: rec("U", `{"name":"id","type":"string"}`), changes: []string{"TYPE_MISMATCH /fields/id/type"}, fwd: "breaking"},
		{name: "enum symbol added", old: rec("U", kind(`"A","B"`, "")), new: rec("U", kind(`"A","B","C"`, "")),
			changes: []string{"ENUM_SYMBOLS_ADDED /fields/kind/type/symbols"}, ok: true, fwd: "breaking"},
		{name: "enum symbol removed", old: rec("U", kind(`"A","B"`, "")), new: rec("U", kind(`"A"`, "")),
			changes: []string{"MISSING_ENUM_SYMBOLS /fields/kind/type/symbols"}},
		{name: "enum symbol removed, reader has a default", old: rec("U", kind(`"A","B"`, `,"default":"A"`)), new: rec("U", kind(`"A"`, `,"default":"A"`)),
			changes: []string{"ENUM_SYMBOLS_REMOVED /fields/kind/type/symbols"}, ok: true},
		{name: "field made nullable", old: rec("U", id), new: rec("U", `{"name":"id","type":["null","int"],"default":null}`),
			changes: []string{"TYPE_CHANGED_TO_UNION /fields/id/type"}, ok: true, fwd: "breaking"},
		{name: "union branch removed", old: rec("U", `{"name":"v","type":["int","string"]}`), new: rec("U", `{"name":"v","type":["int"]}`),
			changes: []string{"MISSING_UNION_BRANCH /fields/v/type/1"}, fwd: "ok"},
		{name: "union branch added", old: rec("U", `{"name":"v","type":["int"]}`), new: rec("U", `{"name":"v","type":["int","string"]}`),
			changes: []string{"UNION_BRANCH_ADDED /fields/v/type"}, ok: true},
		{name: "a later union branch reads it", old: rec("U", id), new: rec("U", `{"name":"id","type":["string","long"]}`),
			changes: []string{"TYPE_PROMOTED /fields/id/type", "TYPE_CHANGED_TO_UNION /fields/id/type"}, ok: true},
		{name: "first union branch by alias fails, the next fits", old: rec("W", id),
			new:     `[` + `{"type":"record","name":"A","aliases":["W"],"fields":[{"name":"z","type":"int"}]},` + rec("W", id) + `]`,
			changes: []string{"TYPE_CHANGED_TO_UNION /"}, ok: true},
		{name: "record namespace changed", old: recNS("a", "U", id), new: recNS("b", "U", id), changes: []string{"NAME_CHANGED /name"}, ok: true, fwd: "ok"},
		{name: "enum and fixed namespaces changed", old: recNS("a", "U", `{"name":"k","type":{"type":"enum","name":"K","symbols":["X"]}}`, `{"name":"h","type":{"type":"fixed","name":"H","size":4}}`),
			new:     recNS("b", "U", `{"name":"k","type":{"type":"enum","name":"K","symbols":["X"]}}`, `{"name":"h","type":{"type":"fixed","name":"H","size":4}}`),
			changes: []string{"NAME_CHANGED /name", "NAME_CHANGED /fields/k/type/name", "NAME_CHANGED /fields/h/type/name"}, ok: true, fwd: "ok"},
		{name: "union branch namespace changed", old: rec("U", `{"name":"r","type":["null",`+recNS("a", "R", id)+`]}`),
			new:     rec("U", `{"name":"r","type":["null",`+recNS("b", "R", id)+`]}`),
			changes: []string{"NAME_CHANGED /fields/r/type/1/name"}, ok: true, fwd: "ok"},
		{name: "record renamed", old: rec("U", id), new: rec("P", id), changes: []string{"NAME_MISMATCH /name"}, fwd: "breaking"},
		{name: "record renamed with an alias", old: recNS("s", "U", id), new: `{"type":"record","name":"P","namespace":"s","aliases":["s.U"],"fields":[` + id + `]}`,
			changes: []string{"NAME_CHANGED /name"}, ok: true, fwd: "breaking"},
		{name: "fixed size changed", old: rec("U", `{"name":"h","type":{"type":"fixed","name":"H","size":16}}`), new: rec("U", `{"name":"h","type":{"type":"fixed","name":"H","size":32}}`),
			changes: []string{"FIXED_SIZE_MISMATCH /fields/h/type/size"}, fwd: "breaking"},
		{name: "array items promoted", old: rec("U", `{"name":"xs","type":{"type":"array","items":"int"}}`), new: rec("U", `{"name":"xs","type":{"type":"array","items":"long"}}`),
			changes: []string{"TYPE_PROMOTED /fields/xs/type/items"}, ok: true},
		{name: "map values changed", old: rec("U", `{"name":"m","type":{"type":"map","values":"int"}}`), new: rec("U", `{"name":"m","type":{"type":"map","values":"boolean"}}`),
			changes: []string{"TYPE_MISMATCH /fields/m/type/values"}},
		{name: "nested record field added", old: rec("U", `{"name":"a","type":`+rec("A", `{"name":"s","type":"string"}`)+`}`),
			new:     rec("U", `{"name":"a","type":`+rec("A", `{"name":"s","type":"string"}`, `{"name":"zip","type":"string"}`)+`}`),
			changes: []string{"READER_FIELD_MISSING_DEFAULT_VALUE /fields/a/type/fields/zip"}},
		{name: "an alias that matches two writer fields", old: rec("U", `{"name":"a","type":"int"}`, `{"name":"b","type":"int"}`),
			new: rec("U", `{"name":"a","aliases":["b"],"type":"int"}`), changes: []string{"READER_FIELD_MATCHES_MULTIPLE_WRITER_FIELDS /fields/a"}},
		{name: "an alias to itself", old: rec("U", `{"name":"a","type":"int"}`), new: rec("U", `{"name":"a","aliases":["a"],"type":"int"}`),
			changes: []string{"READER_FIELD_MATCHES_MULTIPLE_WRITER_FIELDS /fields/a"}},
		{name: "an alias listed twice matches once", old: rec("U", `{"name":"b","type":"int"}`),
			new: rec("U", `{"name":"a","aliases":["b","b"],"type":"int"}`), changes: []string{"FIELD_RENAMED /fields/a"}, ok: true},
		{name: "two aliases that match two writer fields", old: rec("U", `{"name":"b","type":"int"}`, `{"name":"c","type":"int"}`),
			new: rec("U", `{"name":"a","aliases":["b","c"],"type":"int"}`), changes: []string{"READER_FIELD_MATCHES_MULTIPLE_WRITER_FIELDS /fields/a"}},
		{name: "enum field with an enum default but no field default", old: rec("U", id),
			new: rec("U", id, `{"name":"k","type":{"type":"enum","name":"K","symbols":["X","Y"],"default":"X"}}`), changes: []string{"TYPE_MISMATCH /fields/k/type"}},
		{name: "recursive record", old: rec("N", `{"name":"next","type":["null","N"]}`, `{"name":"v","type":"int"}`),
			new: rec("N", `{"name":"next","type":["null","N"]}`, `{"name":"v","type":"long"}`), changes: []string{"TYPE_PROMOTED /fields/v/type"}, ok: true},
	})
}

// Avro's checker has no depth limit: a schema 100 levels deep compares.
func TestAvroDeepNesting(t *testing.T) {
	deep := func(leaf string) string {
		s := leaf
		for i := range 100 {
			s = rec(fmt.Sprintf("R%d", i), `{"name":"f","type":`+s+`}`)
		}
		return s
	}
	o, err := Parse(Avro, deep(`"int"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Parse(Avro, deep(`"long"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	diffs := Diff(o, n)
	if len(diffs) != 1 || diffs[0].Rule != "TYPE_PROMOTED" || diffs[0].Backward != Compatible || diffs[0].Forward != Breaking {
		t.Fatalf("deep promotion: %+v", diffs)
	}
	if !strings.HasPrefix(diffs[0].Path, "/fields/f/type/fields/f/type/") {
		t.Fatalf("path %s", diffs[0].Path)
	}
}

// The registry takes the schemas Apache Avro's parser takes, no more, no
// less.
func TestAvroParse(t *testing.T) {
	refused := []struct{ name, text, want string }{
		{"record named after a primitive", `{"type":"record","name":"int","fields":[]}`, "primitives"},
		{"namespaced record named after a primitive", `{"type":"record","name":"a.long","fields":[]}`, "primitives"},
		{"bare unquoted int", `int`, "not JSON"},
		{"type null", `{"type":null}`, "no type"},
		{"type a number", `{"type":3}`, "no type"},
		{"object type", `{"type":{"type":"int"}}`, "no type"},
		{"fixed size 4.0", `{"type":"fixed","name":"F","size":4.0}`, "size"},
		{"fixed size 2^31", `{"type":"fixed","name":"F","size":2147483648}`, "size"},
		{"fixed size -1", `{"type":"fixed","name":"F","size":-1}`, "size"},
		{"empty order", rec("R", `{"name":"a","type":"int","order":""}`), "order"},
		{"order a number", rec("R", `{"name":"a","type":"int","order":1}`), "order"},
		{"bad name", `{"type":"record","name":"1x","fields":[]}`, "illegal name"},
		{"bad field name", rec("R", `{"name":"a-b","type":"int"}`), "illegal field name"},
		{"duplicate field", rec("R", `{"name":"a","type":"int"}`, `{"name":"a","type":"long"}`), "duplicate field"},
		{"different redefinition", rec("R", `{"name":"a","type":`+rec("X", `{"name":"v","type":"int"}`)+`}`, `{"name":"b","type":`+rec("X", `{"name":"v","type":"long"}`)+`}`), "redefine"},
		{"undefined name", rec("R", `{"name":"a","type":"Nope"}`), "undefined"},
		{"nested union", `["int",["string"]]`, "nested union"},
		{"duplicate union branch", `["int","int"]`, "duplicate in union"},
		{"trailing content", `"int" "long"`, "dangling"},
		{"enum default not a symbol", `{"type":"enum","name":"E","symbols":["A"],"default":"B"}`, "not one of its symbols"},
		{"record without fields", `{"type":"record","name":"R"}`, "no fields"},
		{"int default 1.5", rec("R", `{"name":"a","type":"int","default":1.5}`), "1.5"},
		{"int default too large", rec("R", `{"name":"a","type":"int","default":2147483648}`), "2147483648"},
		{"string default an object", rec("R", `{"name":"a","type":"string","default":{"x":1}}`), `{"x":1}`},
		{"union default fits no branch", rec("R", `{"name":"a","type":["null","int"],"default":"s"}`), `"s"`},
	}
	for _, c := range refused {
		_, err := Parse(Avro, c.text, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "<nil>") {
			t.Errorf("%s: error prints <nil>: %v", c.name, err)
		}
	}
	accepted := []struct{ name, text string }{
		{"line comment", "// the request\n" + rec("R", `{"name":"a","type":"int"}`)},
		{"block comment", `{"type":"record", /* why */ "name":"R","fields":[{"name":"a","type":"int"}]}`},
		{"comment-like text in a string", rec("R", `{"name":"a","type":"string","doc":"see http://x // not a comment"}`)},
		{"identical redefinition", rec("R", `{"name":"a","type":`+rec("X", `{"name":"v","type":"int"}`)+`}`, `{"name":"b","type":`+rec("X", `{"name":"v","type":"int"}`)+`}`)},
		{"quoted primitive", `"int"`},
		{"union default of a later branch", rec("R", `{"name":"a","type":["null","int"],"default":5}`)},
		{"double default as text", rec("R", `{"name":"a","type":"double","default":"NaN"}`)},
		{"order in capitals", rec("R", `{"name":"a","type":"int","order":"DESCENDING"}`)},
		{"name in the null namespace from inside one", recNS("n", "R", `{"name":"a","type":`+rec("X", `{"name":"v","type":"int"}`)+`}`, `{"name":"b","type":"n.X"}`)},
		{"error type", `{"type":"error","name":"E","fields":[]}`},
	}
	for _, c := range accepted {
		s, err := Parse(Avro, c.text, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		// What the data plane compiles is plain JSON that parses again.
		et := EngineText(s, c.text)
		if _, err := decodeAvroJSON(et); err != nil {
			t.Errorf("%s: engine text %q: %v", c.name, et, err)
		}
		if strings.Contains(c.name, "comment") && strings.Contains(et, "/*") {
			t.Errorf("%s: engine text keeps the comment: %s", c.name, et)
		}
	}
	// A stored schema is read without the default check, as Confluent
	// reads stored versions.
	if _, err := ParseStored(Avro, rec("R", `{"name":"a","type":"int","default":1.5}`), nil); err != nil {
		t.Errorf("stored schema with a lax default: %v", err)
	}
}

// The Parsing Canonical Form and its SHA-256 fingerprint agree with an
// independent implementation (hamba/avro) on the schemas both parse.
func TestAvroCanonicalFormMatchesHamba(t *testing.T) {
	for _, text := range []string{
		`"int"`,
		recNS("sluice", "User", `{"name":"id","type":"int","doc":"x","default":0}`, `{"name":"tags","type":{"type":"array","items":"string"}}`,
			`{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}}`, `{"name":"h","type":{"type":"fixed","name":"H","namespace":"other","size":4}}`,
			`{"name":"m","type":{"type":"map","values":["null","Kind"]}}`, `{"name":"again","type":"Kind"}`),
		rec("N", `{"name":"next","type":["null","N"]}`),
	} {
		s, err := Parse(Avro, text, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			t.Fatal(err)
		}
		if got := CanonicalForm(s); got != h.String() {
			t.Errorf("canonical form\n got  %s\n want %s", got, h.String())
		}
		fp := h.Fingerprint()
		if c := NewContract(s); c.Fingerprint != "sha256:"+hex.EncodeToString(fp[:]) {
			t.Errorf("fingerprint %s, hamba sha256:%x", c.Fingerprint, fp)
		}
	}
	// The specification's [STRIP] drops logicalType (hamba keeps it).
	s, err := Parse(Avro, `{"type":"string","logicalType":"uuid"}`, nil)
	if err != nil || CanonicalForm(s) != `"string"` {
		t.Fatalf("logical type in the canonical form: %v %v", CanonicalForm(s), err)
	}
}
