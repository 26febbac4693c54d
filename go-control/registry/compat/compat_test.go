package compat

import (
	"fmt"
	"strings"
	"testing"
)

// matrixCase is one schema change. backRule is the rule a BACKWARD check
// (new schema reads old data) must report, "" if it must pass; fwdRule the
// same for FORWARD (old schema reads new data). path, when set, must appear
// in the failing message.
type matrixCase struct {
	name              string
	old, new          string
	backRule, fwdRule string
	path              string
}

// expectedRules derives what each level must report from the two
// directions: FULL is both, transitive forms equal the plain ones with a
// single earlier version, NONE never fails.
func expectedRules(l Level, c matrixCase) []string {
	var out []string
	if l.backward() && c.backRule != "" {
		out = append(out, c.backRule)
	}
	if l.forward() && c.fwdRule != "" {
		out = append(out, c.fwdRule)
	}
	return out
}

func runMatrix(t *testing.T, typ Type, cases []matrixCase) {
	t.Helper()
	for _, c := range cases {
		oldS, err := Parse(typ, c.old, nil)
		if err != nil {
			t.Fatalf("%s: old schema: %v", c.name, err)
		}
		newS, err := Parse(typ, c.new, nil)
		if err != nil {
			t.Fatalf("%s: new schema: %v", c.name, err)
		}
		for _, l := range allLevels {
			msgs := Check(l, newS, []Version{{Version: 1, Schema: oldS, Text: c.old}}).Messages
			want := expectedRules(l, c)
			if len(want) == 0 {
				if len(msgs) != 0 {
					t.Errorf("%s %s/%s: want compatible, got %v", typ, c.name, l, msgs)
				}
				continue
			}
			if len(msgs) == 0 {
				t.Errorf("%s %s/%s: want incompatible (%v), got compatible", typ, c.name, l, want)
				continue
			}
			joined := strings.Join(msgs, "\n")
			for _, rule := range want {
				if !strings.Contains(joined, "errorType:'"+rule+"'") {
					t.Errorf("%s %s/%s: want rule %s in %v", typ, c.name, l, rule, msgs)
				}
			}
			if c.path != "" && !strings.Contains(joined, c.path) {
				t.Errorf("%s %s/%s: want path %q in %v", typ, c.name, l, c.path, msgs)
			}
			if !strings.Contains(joined, "{oldSchemaVersion: 1}") || !strings.Contains(joined, "{compatibility: '"+string(l)+"'}") {
				t.Errorf("%s %s/%s: messages lack version/level context: %v", typ, c.name, l, msgs)
			}
		}
	}
}

const avroUser = `{"type":"record","name":"User","namespace":"sluice","fields":[
 {"name":"id","type":"int"},{"name":"name","type":"string"},
 {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},
 {"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"street","type":"string"}]}}]}`

// avroWith rewrites avroUser's field list.
func avroWith(fields string) string {
	return `{"type":"record","name":"User","namespace":"sluice","fields":[` + fields + `]}`
}

const (
	fID      = `{"name":"id","type":"int"}`
	fName    = `{"name":"name","type":"string"}`
	fKind    = `{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}}`
	fAddress = `{"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"street","type":"string"}]}}`
)

// Transitive levels must look past the latest version.
func TestTransitiveLooksAtEveryVersion(t *testing.T) {
	v1 := avroWith(fID)
	v2 := avroWith(fID + `,{"name":"name","type":"string","default":""}`)
	v3 := avroWith(fID + `,{"name":"name","type":"string"}`)
	p := func(s string) Schema {
		t.Helper()
		x, err := Parse(Avro, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	prev := []Version{{1, p(v1), v1}, {2, p(v2), v2}}
	if msgs := Check(Backward, p(v3), prev).Messages; len(msgs) != 0 {
		t.Fatalf("BACKWARD against v2 only: want compatible, got %v", msgs)
	}
	msgs := Check(BackwardTransitive, p(v3), prev).Messages
	joined := strings.Join(msgs, "\n")
	if !strings.Contains(joined, "READER_FIELD_MISSING_DEFAULT_VALUE") || !strings.Contains(joined, "{oldSchemaVersion: 1}") ||
		strings.Contains(joined, "{oldSchemaVersion: 2}") {
		t.Fatalf("BACKWARD_TRANSITIVE: want a failure against version 1 only, got %v", msgs)
	}
	// FORWARD_TRANSITIVE: v1 (no name) reads v3 data fine, v2 reads it fine.
	if msgs := Check(ForwardTransitive, p(v3), prev).Messages; len(msgs) != 0 {
		t.Fatalf("FORWARD_TRANSITIVE: want compatible, got %v", msgs)
	}
	if msgs := Check(FullTransitive, p(v3), prev).Messages; len(msgs) == 0 {
		t.Fatal("FULL_TRANSITIVE: want incompatible")
	}
}

func protoWith(fields string, extra string) string {
	return "syntax = \"proto3\";\npackage sluice.test;\nmessage M {\n" + fields + "\n}\nmessage Sub { int32 x = 1; }\n" + extra
}

const pFields = "int32 id = 1; string name = 2; int32 a = 3; int32 b = 4;"

const jsonBaseSchema = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","enum":["a","b","c"],"maxLength":8}},"required":["id"]}`

const tensorBase = `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`

func TestTensorMatrix(t *testing.T) {
	runMatrix(t, Tensor, []matrixCase{
		{name: "input added", old: tensorBase,
			new:      `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]},{"name":"z","dtype":"i64","shape":[-1]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`,
			backRule: "TENSOR_INPUT_ADDED", fwdRule: "TENSOR_INPUT_REMOVED", path: "/inputs/z"},
		{name: "input renamed", old: tensorBase, new: strings.Replace(tensorBase, `"name":"x"`, `"name":"x2"`, 1),
			backRule: "TENSOR_INPUT_REMOVED", fwdRule: "TENSOR_INPUT_ADDED", path: "/inputs/x"},
		{name: "dtype changed", old: tensorBase, new: strings.Replace(tensorBase, `"f32","shape":[-1,4]`, `"f16","shape":[-1,4]`, 1),
			backRule: "TENSOR_DTYPE_CHANGED", fwdRule: "TENSOR_DTYPE_CHANGED", path: "/inputs/x/dtype"},
		{name: "input dim relaxed to dynamic", old: tensorBase, new: strings.Replace(tensorBase, `[-1,4]`, `[-1,-1]`, 1),
			fwdRule: "TENSOR_DIM_NARROWED", path: "/inputs/x/shape/1"},
		{name: "input dim fixed", old: tensorBase, new: strings.Replace(tensorBase, `[-1,4]`, `[8,4]`, 1),
			backRule: "TENSOR_DIM_NARROWED", path: "/inputs/x/shape/0"},
		{name: "rank changed", old: tensorBase, new: strings.Replace(tensorBase, `[-1,4]`, `[-1,2,2]`, 1),
			backRule: "TENSOR_RANK_CHANGED", fwdRule: "TENSOR_RANK_CHANGED"},
		{name: "output added", old: tensorBase,
			new:     strings.Replace(tensorBase, `"outputs":[`, `"outputs":[{"name":"p","dtype":"f32","shape":[-1]},`, 1),
			fwdRule: "TENSOR_OUTPUT_REMOVED", path: "/outputs/p"},
		{name: "output dim relaxed", old: tensorBase, new: strings.Replace(tensorBase, `[-1,3]`, `[-1,-1]`, 1),
			backRule: "TENSOR_DIM_NARROWED", path: "/outputs/y/shape/1"},
	})
}

func TestParseRejectsBadSchemas(t *testing.T) {
	bad := []struct {
		typ  Type
		text string
		want string
	}{
		{Avro, `{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}`, "undefined name"},
		{Avro, `{"type":"record"`, ""},
		{Protobuf, `syntax = "proto3"; message M { int32 a = 1; int64 b = 1; }`, "same tag"},
		{Protobuf, `syntax = "proto3"; import "missing.proto"; message M {}`, "missing.proto"},
		{JSON, `{"type":"strin"}`, ""},
		{JSON, `{"$ref":"http://example.com/x.json"}`, ""},
		{JSON, `42`, ""},
		{Tensor, `{"inputs":[]}`, "no inputs"},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f31","shape":[1]}]}`, "unknown dtype"},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f32","shape":[-2]}]}`, "dim -2"},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f32","shape":[1]},{"name":"x","dtype":"f32","shape":[1]}]}`, "duplicate"},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f32","shape":[1]}],"extra":1}`, "unknown field"},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f32"}]}`, "missing shape"},
		{Avro, "   ", "empty"},
		{Avro, strings.Repeat(" ", SchemaBytesMax+1), "limit"},
	}
	for _, b := range bad {
		_, err := Parse(b.typ, b.text, nil)
		if err == nil {
			t.Errorf("%s %.60q: want an error", b.typ, b.text)
			continue
		}
		if b.want != "" && !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s %.60q: error %q lacks %q", b.typ, b.text, err, b.want)
		}
	}
}

func TestReferencesResolve(t *testing.T) {
	addr := `{"type":"record","name":"Address","namespace":"sluice","fields":[{"name":"street","type":"string"}]}`
	user := `{"type":"record","name":"User","namespace":"sluice","fields":[{"name":"home","type":"sluice.Address"}]}`
	if _, err := Parse(Avro, user, nil); err == nil {
		t.Fatal("avro: unresolved named type accepted")
	}
	if _, err := Parse(Avro, user, []Dependency{{Name: "sluice.Address", Schema: addr}}); err != nil {
		t.Fatalf("avro with reference: %v", err)
	}
	dep := "syntax = \"proto3\";\npackage common;\nmessage Money { int64 cents = 1; }"
	main := "syntax = \"proto3\";\nimport \"common/money.proto\";\nimport \"google/protobuf/timestamp.proto\";\nmessage Order { common.Money price = 1; google.protobuf.Timestamp at = 2; }"
	if _, err := Parse(Protobuf, main, []Dependency{{Name: "common/money.proto", Schema: dep}}); err != nil {
		t.Fatalf("protobuf with reference: %v", err)
	}
	jdep := `{"type":"object","properties":{"street":{"type":"string"}}}`
	jmain := `{"type":"object","properties":{"home":{"$ref":"address.json"}}}`
	if _, err := Parse(JSON, jmain, nil); err == nil {
		t.Fatal("json: unresolved $ref accepted")
	}
	a, err := Parse(JSON, jmain, []Dependency{{Name: "address.json", Schema: jdep}})
	if err != nil {
		t.Fatalf("json with reference: %v", err)
	}
	// The checker follows the reference into the dependency.
	jdep2 := `{"type":"object","properties":{"street":{"type":"integer"}}}`
	b, err := Parse(JSON, jmain, []Dependency{{Name: "address.json", Schema: jdep2}})
	if err != nil {
		t.Fatal(err)
	}
	issues := CanRead(b, a)
	if len(issues) != 1 || issues[0].Rule != "TYPE_CHANGED" || issues[0].Path != "#/properties/home/properties/street" {
		t.Fatalf("json reference diff: got %v", issues)
	}
}

func TestCanonicalIgnoresWhitespace(t *testing.T) {
	a, _ := Parse(Avro, `{"type": "record", "name": "R", "fields": []}`, nil)
	b, _ := Parse(Avro, `{"type":"record","name":"R","fields":[]}`, nil)
	if a == nil || b == nil || a.Canonical() != b.Canonical() {
		t.Fatalf("canonical forms differ")
	}
	if _, ok := ParseLevel("backward_transitive"); !ok {
		t.Fatal("lower-case level refused")
	}
	if _, ok := ParseLevel("SIDEWAYS"); ok {
		t.Fatal("bogus level accepted")
	}
	if _, err := ParseType("xml"); err == nil {
		t.Fatal("bogus type accepted")
	}
}

// Per type: a history v1, v2 and a candidate; which earlier versions each
// level reports. Transitive levels must look at v1 too.
func TestTransitiveEveryType(t *testing.T) {
	type hist struct {
		typ          Type
		v1, v2, cand string
		want         map[Level][]int // versions reported
	}
	sig := func(dims string) string {
		return `{"inputs":[{"name":"x","dtype":"f32","shape":` + dims + `}],"outputs":[]}`
	}
	cases := []hist{
		{typ: Avro, v1: avroWith(fID), v2: avroWith(fID + `,{"name":"n","type":"string","default":""}`),
			cand: avroWith(fID + `,{"name":"n","type":"string"}`),
			want: map[Level][]int{Backward: nil, BackwardTransitive: {1}, Forward: nil, ForwardTransitive: nil, Full: nil, FullTransitive: {1}}},
		// Field 2 removed in v2, then reused with another type.
		{typ: Protobuf, v1: protoWith("int32 id = 1; string name = 2;", ""), v2: protoWith("int32 id = 1;", ""),
			cand: protoWith("int32 id = 1; int64 name = 2;", ""),
			want: map[Level][]int{Backward: nil, BackwardTransitive: {1}, Forward: nil, ForwardTransitive: {1}, Full: nil, FullTransitive: {1}}},
		// Candidate fixes the batch dim: breaks BACKWARD with both versions.
		{typ: Tensor, v1: sig(`[-1,4]`), v2: sig(`[-1,-1]`), cand: sig(`[8,-1]`),
			want: map[Level][]int{Backward: {2}, BackwardTransitive: {2, 1}, Forward: nil, ForwardTransitive: {1}, Full: {2}, FullTransitive: {2, 1}}},
		{typ: JSON, v1: `{"type":"integer"}`, v2: `{"type":"number"}`, cand: `{"type":"string"}`,
			want: map[Level][]int{Backward: {2}, BackwardTransitive: {2, 1}, Forward: {2}, ForwardTransitive: {2, 1}, None: nil}},
	}
	for _, c := range cases {
		var prev []Version
		for i, text := range []string{c.v1, c.v2} {
			s, err := Parse(c.typ, text, nil)
			if err != nil {
				t.Fatalf("%s v%d: %v", c.typ, i+1, err)
			}
			prev = append(prev, Version{Version: i + 1, Schema: s, Text: text})
		}
		cand, err := Parse(c.typ, c.cand, nil)
		if err != nil {
			t.Fatalf("%s candidate: %v", c.typ, err)
		}
		for level, want := range c.want {
			msgs := Check(level, cand, prev).Messages
			var got []int
			for _, m := range msgs {
				var v int
				if _, err := fmt.Sscanf(m, "{oldSchemaVersion: %d}", &v); err == nil {
					got = append(got, v)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s %s: reported versions %v, want %v (%v)", c.typ, level, got, want, msgs)
			}
		}
	}
}
