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

var allLevels = []Level{None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive}

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
			msgs := Check(l, newS, []Version{{Version: 1, Schema: oldS, Text: c.old}})
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

func TestAvroMatrix(t *testing.T) {
	base := avroWith(strings.Join([]string{fID, fName, fKind, fAddress}, ","))
	if base != strings.ReplaceAll(avroUser, "\n ", "") {
		t.Fatalf("fixture drift")
	}
	rest := "," + fKind + "," + fAddress
	runMatrix(t, Avro, []matrixCase{
		{name: "field added with default", old: base,
			new: avroWith(fID + "," + fName + rest + `,{"name":"email","type":"string","default":""}`)},
		{name: "field added without default", old: base,
			new:      avroWith(fID + "," + fName + rest + `,{"name":"email","type":"string"}`),
			backRule: "READER_FIELD_MISSING_DEFAULT_VALUE", path: "/fields/email"},
		{name: "field removed (no default)", old: base, new: avroWith(fID + rest),
			fwdRule: "READER_FIELD_MISSING_DEFAULT_VALUE", path: "/fields/name"},
		{name: "field with default removed", old: avroWith(fID + rest + `,{"name":"n","type":"long","default":0}`),
			new: avroWith(fID + rest)},
		{name: "field renamed with alias", old: base,
			new:     avroWith(fID + `,{"name":"fullname","aliases":["name"],"type":"string"}` + rest),
			fwdRule: "READER_FIELD_MISSING_DEFAULT_VALUE", path: "/fields/name"},
		{name: "field renamed without alias", old: base,
			new:      avroWith(fID + `,{"name":"fullname","type":"string"}` + rest),
			backRule: "READER_FIELD_MISSING_DEFAULT_VALUE", fwdRule: "READER_FIELD_MISSING_DEFAULT_VALUE", path: "/fields/"},
		{name: "type promoted int to long", old: base,
			new:     avroWith(`{"name":"id","type":"long"}` + "," + fName + rest),
			fwdRule: "TYPE_MISMATCH", path: "/fields/id/type"},
		{name: "type promoted long to double", old: avroWith(`{"name":"id","type":"long"}` + rest),
			new: avroWith(`{"name":"id","type":"double"}` + rest), fwdRule: "TYPE_MISMATCH"},
		{name: "string to bytes", old: base, new: avroWith(fID + `,{"name":"name","type":"bytes"}` + rest)},
		{name: "type changed int to string", old: base,
			new:      avroWith(`{"name":"id","type":"string"}` + "," + fName + rest),
			backRule: "TYPE_MISMATCH", fwdRule: "TYPE_MISMATCH", path: "/fields/id/type"},
		{name: "enum symbol added", old: base,
			new:     avroWith(fID + "," + fName + `,{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"]}},` + fAddress),
			fwdRule: "MISSING_ENUM_SYMBOLS", path: "/fields/kind/type/symbols"},
		{name: "enum symbol added with default", old: avroWith(fID + `,{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"],"default":"A"}}`),
			new: avroWith(fID + `,{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"],"default":"A"}}`)},
		{name: "field made nullable", old: base,
			new:     avroWith(fID + `,{"name":"name","type":["null","string"],"default":null}` + rest),
			fwdRule: "TYPE_MISMATCH", path: "/fields/name/type/0"},
		{name: "union branch removed", old: avroWith(fID + `,{"name":"v","type":["int","string"]}`),
			new:      avroWith(fID + `,{"name":"v","type":["int"]}`),
			backRule: "MISSING_UNION_BRANCH", path: "/fields/v/type/1"},
		{name: "nested record field added without default", old: base,
			new:      avroWith(fID + "," + fName + "," + fKind + `,{"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"street","type":"string"},{"name":"zip","type":"string"}]}}`),
			backRule: "READER_FIELD_MISSING_DEFAULT_VALUE", path: "/fields/address/type/fields/zip"},
		{name: "record renamed", old: base,
			new:      strings.Replace(base, `"name":"User"`, `"name":"Person"`, 1),
			backRule: "NAME_MISMATCH", fwdRule: "NAME_MISMATCH"},
		{name: "record renamed with alias", old: base,
			new:     strings.Replace(base, `"name":"User"`, `"name":"Person","aliases":["sluice.User"]`, 1),
			fwdRule: "NAME_MISMATCH"},
		{name: "fixed size changed", old: avroWith(`{"name":"h","type":{"type":"fixed","name":"H","size":16}}`),
			new:      avroWith(`{"name":"h","type":{"type":"fixed","name":"H","size":32}}`),
			backRule: "FIXED_SIZE_MISMATCH", fwdRule: "FIXED_SIZE_MISMATCH"},
		{name: "array items promoted", old: avroWith(`{"name":"xs","type":{"type":"array","items":"int"}}`),
			new: avroWith(`{"name":"xs","type":{"type":"array","items":"long"}}`), fwdRule: "TYPE_MISMATCH", path: "/fields/xs/type/items"},
	})
}

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
	if msgs := Check(Backward, p(v3), prev); len(msgs) != 0 {
		t.Fatalf("BACKWARD against v2 only: want compatible, got %v", msgs)
	}
	msgs := Check(BackwardTransitive, p(v3), prev)
	joined := strings.Join(msgs, "\n")
	if !strings.Contains(joined, "READER_FIELD_MISSING_DEFAULT_VALUE") || !strings.Contains(joined, "{oldSchemaVersion: 1}") ||
		strings.Contains(joined, "{oldSchemaVersion: 2}") {
		t.Fatalf("BACKWARD_TRANSITIVE: want a failure against version 1 only, got %v", msgs)
	}
	// FORWARD_TRANSITIVE: v1 (no name) reads v3 data fine, v2 reads it fine.
	if msgs := Check(ForwardTransitive, p(v3), prev); len(msgs) != 0 {
		t.Fatalf("FORWARD_TRANSITIVE: want compatible, got %v", msgs)
	}
	if msgs := Check(FullTransitive, p(v3), prev); len(msgs) == 0 {
		t.Fatal("FULL_TRANSITIVE: want incompatible")
	}
}

func protoWith(fields string, extra string) string {
	return "syntax = \"proto3\";\npackage sluice.test;\nmessage M {\n" + fields + "\n}\nmessage Sub { int32 x = 1; }\n" + extra
}

const pFields = "int32 id = 1; string name = 2; int32 a = 3; int32 b = 4;"

func TestProtobufMatrix(t *testing.T) {
	base := protoWith(pFields, "")
	runMatrix(t, Protobuf, []matrixCase{
		{name: "field added", old: base, new: protoWith(pFields+" string email = 5;", "")},
		{name: "field removed", old: base, new: protoWith("int32 id = 1; int32 a = 3; int32 b = 4;", "")},
		{name: "field renamed", old: base, new: protoWith("int32 id = 1; string full_name = 2; int32 a = 3; int32 b = 4;", "")},
		{name: "field number reused with other type", old: base,
			new:      protoWith("int32 id = 1; int64 count = 2; int32 a = 3; int32 b = 4;", ""),
			backRule: "FIELD_SCALAR_KIND_CHANGED", fwdRule: "FIELD_SCALAR_KIND_CHANGED", path: "/sluice.test.M/2"},
		{name: "type changed within wire group", old: base, new: protoWith("int64 id = 1; string name = 2; int32 a = 3; int32 b = 4;", "")},
		{name: "string to bytes", old: base, new: protoWith("int32 id = 1; bytes name = 2; int32 a = 3; int32 b = 4;", "")},
		{name: "scalar to message", old: base, new: protoWith("Sub id = 1; string name = 2; int32 a = 3; int32 b = 4;", ""),
			backRule: "FIELD_KIND_CHANGED", fwdRule: "FIELD_KIND_CHANGED", path: "/sluice.test.M/1"},
		{name: "message type changed", old: protoWith(pFields+" Sub s = 5;", "message Other { int32 x = 1; }"),
			new:      protoWith(pFields+" Other s = 5;", "message Other { int32 x = 1; }"),
			backRule: "FIELD_NAMED_TYPE_CHANGED", fwdRule: "FIELD_NAMED_TYPE_CHANGED", path: "/sluice.test.M/5"},
		{name: "numeric cardinality changed", old: base, new: protoWith("repeated int32 id = 1; string name = 2; int32 a = 3; int32 b = 4;", ""),
			backRule: "FIELD_NUMERIC_LABEL_CHANGED", fwdRule: "FIELD_NUMERIC_LABEL_CHANGED"},
		{name: "string cardinality changed", old: base, new: protoWith("int32 id = 1; repeated string name = 2; int32 a = 3; int32 b = 4;", "")},
		{name: "message removed", old: protoWith(pFields, "message Gone { int32 x = 1; }"), new: base,
			backRule: "MESSAGE_REMOVED", path: "/sluice.test.Gone"},
		{name: "enum removed", old: protoWith(pFields, "enum E { E0 = 0; }"), new: base, backRule: "ENUM_REMOVED"},
		{name: "package changed", old: base, new: strings.Replace(base, "sluice.test", "sluice.other", 1),
			backRule: "PACKAGE_CHANGED", fwdRule: "PACKAGE_CHANGED"},
		{name: "fields moved into new oneof", old: base,
			new:      protoWith("int32 id = 1; string name = 2; oneof choice { int32 a = 3; int32 b = 4; }", ""),
			backRule: "MULTIPLE_FIELDS_MOVED_TO_ONEOF", path: "/sluice.test.M/oneof/choice"},
		{name: "field moved into existing oneof", old: protoWith("int32 id = 1; string name = 2; int32 a = 3; oneof choice { int32 b = 4; }", ""),
			new:      protoWith("int32 id = 1; string name = 2; oneof choice { int32 a = 3; int32 b = 4; }", ""),
			backRule: "FIELD_MOVED_TO_EXISTING_ONEOF"},
		{name: "oneof field removed", old: protoWith("int32 id = 1; string name = 2; oneof choice { int32 a = 3; int32 b = 4; }", ""),
			new:      protoWith("int32 id = 1; string name = 2; oneof choice { int32 a = 3; }", ""),
			backRule: "ONEOF_FIELD_REMOVED", path: "/sluice.test.M/4"},
		{name: "proto2 required field added",
			old:      "syntax = \"proto2\";\npackage p;\nmessage M { optional int32 id = 1; }",
			new:      "syntax = \"proto2\";\npackage p;\nmessage M { optional int32 id = 1; required string email = 2; }",
			backRule: "REQUIRED_FIELD_ADDED", fwdRule: "REQUIRED_FIELD_REMOVED", path: "/p.M/2"},
	})
}

const jsonBaseSchema = `{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","enum":["a","b","c"],"maxLength":8}},"required":["id"]}`

func TestJSONSchemaMatrix(t *testing.T) {
	closed := `{"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":false}`
	runMatrix(t, JSON, []matrixCase{
		{name: "property added to open model", old: jsonBaseSchema,
			new:      strings.Replace(jsonBaseSchema, `"properties":{`, `"properties":{"email":{"type":"string"},`, 1),
			backRule: "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", path: "#/properties/email"},
		{name: "property added to closed model", old: closed,
			new:     `{"type":"object","properties":{"id":{"type":"integer"},"email":{"type":"string"}},"additionalProperties":false}`,
			fwdRule: "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", path: "#/properties/email"},
		{name: "property removed from open model", old: jsonBaseSchema,
			new:     `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`,
			fwdRule: "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", path: "#/properties/name"},
		{name: "property removed, partially open reader", old: `{"type":"object","properties":{"id":{"type":"integer"},"n":{"type":"string"}},"additionalProperties":{"type":"string"}}`,
			new:      `{"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"integer"}}`,
			backRule: "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", fwdRule: "TYPE_CHANGED"},
		{name: "type changed", old: jsonBaseSchema,
			new:      `{"type":"object","properties":{"id":{"type":"string"},"name":{"type":"string","enum":["a","b","c"],"maxLength":8}},"required":["id"]}`,
			backRule: "TYPE_CHANGED", fwdRule: "TYPE_CHANGED", path: "#/properties/id/type"},
		{name: "type widened integer to number", old: jsonBaseSchema,
			new:     strings.Replace(jsonBaseSchema, `"id":{"type":"integer"}`, `"id":{"type":"number"}`, 1),
			fwdRule: "TYPE_CHANGED", path: "#/properties/id/type"},
		{name: "type narrowed", old: `{"type":["string","null"]}`, new: `{"type":"string"}`, backRule: "TYPE_NARROWED"},
		{name: "required added", old: jsonBaseSchema, new: strings.Replace(jsonBaseSchema, `"required":["id"]`, `"required":["id","name"]`, 1),
			backRule: "REQUIRED_ATTRIBUTE_ADDED", path: "#/properties/name"},
		{name: "enum narrowed", old: jsonBaseSchema, new: strings.Replace(jsonBaseSchema, `["a","b","c"]`, `["a","b"]`, 1),
			backRule: "ENUM_ARRAY_NARROWED", path: "#/properties/name/enum"},
		{name: "enum widened", old: jsonBaseSchema, new: strings.Replace(jsonBaseSchema, `["a","b","c"]`, `["a","b","c","d"]`, 1),
			fwdRule: "ENUM_ARRAY_NARROWED"},
		{name: "maxLength decreased", old: jsonBaseSchema, new: strings.Replace(jsonBaseSchema, `"maxLength":8`, `"maxLength":4`, 1),
			backRule: "MAX_LENGTH_DECREASED", path: "#/properties/name/maxLength"},
		{name: "additional properties closed", old: jsonBaseSchema, new: strings.Replace(jsonBaseSchema, `"required"`, `"additionalProperties":false,"required"`, 1),
			backRule: "ADDITIONAL_PROPERTIES_REMOVED"},
		{name: "anyOf branch added", old: `{"anyOf":[{"type":"string"},{"type":"integer"}]}`,
			new:     `{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"boolean"}]}`,
			fwdRule: "SUM_TYPE_NARROWED", path: "#/anyOf/2"},
		{name: "oneOf introduced", old: `{"type":"string"}`, new: `{"oneOf":[{"type":"string"},{"type":"null"}]}`,
			fwdRule: "TYPE_NARROWED", path: "#/type"},
		{name: "oneOf introduced, not covering", old: `{"type":"string"}`, new: `{"oneOf":[{"type":"integer"},{"type":"null"}]}`,
			backRule: "COMBINED_TYPE_CHANGED", fwdRule: "TYPE_CHANGED"},
		{name: "allOf constraint added", old: `{"type":"object","properties":{"a":{"type":"string"}}}`,
			new:      `{"type":"object","properties":{"a":{"type":"string"}},"allOf":[{"required":["a"]}]}`,
			backRule: "PRODUCT_TYPE_EXTENDED", path: "#/allOf/0"},
		{name: "local $ref followed", old: `{"$defs":{"n":{"type":"integer"}},"type":"object","properties":{"x":{"$ref":"#/$defs/n"}}}`,
			new:      `{"$defs":{"n":{"type":"string"}},"type":"object","properties":{"x":{"$ref":"#/$defs/n"}}}`,
			backRule: "TYPE_CHANGED", fwdRule: "TYPE_CHANGED", path: "#/properties/x"},
	})
}

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
		{Avro, `{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}`, "unknown type"},
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
	if len(issues) != 1 || issues[0].Rule != "TYPE_CHANGED" || issues[0].Path != "#/properties/home/properties/street/type" {
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
			msgs := Check(level, cand, prev)
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
