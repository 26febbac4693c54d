package compat

import (
	"errors"
	"strings"
	"testing"
)

func p3(body string) string { return "syntax = \"proto3\";\n" + body }

// Protobuf cases, derived from Confluent's ProtobufSchema diff rules.
func TestProtobufDiff(t *testing.T) {
	runCompare(t, Protobuf, []cmpCase{
		{name: "package changed", old: p3("package foo;\nmessage M { string s = 1; M.S t = 2; message S { string s = 1; } }"),
			new: p3("package bar;\nmessage M { string s = 1; M.S t = 2; message S { string s = 1; } }"), changes: []string{"PACKAGE_CHANGED #/"}, ok: true},
		{name: "name qualification changed", old: p3("message M { string s = 1; S t = 2; message S { string s = 1; } }"),
			new: p3("message M { string s = 1; .M.S t = 2; message S { string s = 1; } }"), ok: true},
		{name: "field added", old: p3("message M { string a = 1; }"), new: p3("message M { string a = 1; string b = 2; }"),
			changes: []string{"FIELD_ADDED #/M/2"}, ok: true, fwd: "ok"},
		{name: "field added to a nested message", old: p3("message W { int32 i = 1; message M { string a = 1; } }"),
			new: p3("message W { int32 i = 1; message M { string a = 1; string b = 2; } }"), changes: []string{"FIELD_ADDED #/W/M/2"}, ok: true},
		{name: "field removed", old: p3("message M { string a = 1; string b = 2; }"), new: p3("message M { string a = 1; }"),
			changes: []string{"FIELD_REMOVED #/M/2"}, ok: true},
		{name: "required field added", old: "syntax = \"proto2\";\nmessage M { optional string a = 1; }",
			new: "syntax = \"proto2\";\nmessage M { optional string a = 1; required string b = 2; }", changes: []string{"REQUIRED_FIELD_ADDED #/M/2"}, fwd: "breaking"},
		{name: "required field removed", old: "syntax = \"proto2\";\nmessage M { optional string a = 1; required string b = 2; }",
			new: "syntax = \"proto2\";\nmessage M { optional string a = 1; }", changes: []string{"REQUIRED_FIELD_REMOVED #/M/2"}, fwd: "breaking"},
		{name: "field renumbered", old: p3("message M { string a = 1; }"), new: p3("message M { string a = 2; }"),
			changes: []string{"FIELD_REMOVED #/M/1", "FIELD_ADDED #/M/2"}, ok: true},
		{name: "int32 to int64", old: p3("message M { int32 n = 1; }"), new: p3("message M { int64 n = 1; }"),
			changes: []string{"FIELD_SCALAR_TYPE_CHANGED #/M/1"}, ok: true, fwd: "ok"},
		{name: "string to bytes", old: p3("message M { string n = 1; }"), new: p3("message M { bytes n = 1; }"),
			changes: []string{"FIELD_SCALAR_TYPE_CHANGED #/M/1"}, ok: true, fwd: "ok"},
		{name: "int32 to an enum", old: p3("message M { string s = 1; int32 n = 2; }"),
			new:     p3("message M { string s = 1; Status n = 2; }\nenum Status { ACTIVE = 0; INACTIVE = 1; }"),
			changes: []string{"ENUM_ADDED #/Status", "FIELD_SCALAR_TYPE_CHANGED #/M/2"}, ok: true, fwd: "ok"},
		{name: "an enum to int32", old: p3("message M { string s = 1; Status n = 2; }\nenum Status { ACTIVE = 0; INACTIVE = 1; }"),
			new: p3("message M { string s = 1; int32 n = 2; }"), changes: []string{"ENUM_REMOVED #/Status", "FIELD_SCALAR_TYPE_CHANGED #/M/2"}, ok: true, fwd: "ok"},
		{name: "int32 to a message", old: p3("message M { string s = 1; int32 n = 2; }"),
			new:     p3("message M { string s = 1; M2 n = 2; }\nmessage M2 { string s1 = 1; }"),
			changes: []string{"MESSAGE_ADDED #/M2", "FIELD_KIND_CHANGED #/M/2"}, fwd: "breaking"},
		{name: "int32 to string", old: p3("message M { string s = 1; int32 n = 2; }"), new: p3("message M { string s = 1; string t = 2; }"),
			changes: []string{"FIELD_NAME_CHANGED #/M/2", "FIELD_SCALAR_KIND_CHANGED #/M/2"}},
		{name: "message type renamed", old: p3("message M { M2 n = 1; }\nmessage M2 { string s = 1; }"), new: p3("message M { M3 n = 1; }\nmessage M3 { string s = 1; }"),
			changes: []string{"MESSAGE_REMOVED #/M2", "MESSAGE_ADDED #/M3", "FIELD_NAMED_TYPE_CHANGED #/M/1"}},
		{name: "message of a field changed", old: p3("message M { Sub n = 1; }\nmessage Sub { int32 x = 1; }"),
			new: p3("message M { Sub n = 1; }\nmessage Sub { string x = 1; }"), changes: []string{"FIELD_SCALAR_KIND_CHANGED #/Sub/1", "FIELD_NAMED_TYPE_CHANGED #/M/1"}},
		{name: "map value type changed", old: p3("message M { string s = 1; map<string, int32> m = 2; }"), new: p3("message M { string s = 1; map<string, string> n = 2; }"),
			changes: []string{"FIELD_NAME_CHANGED #/M/2", "FIELD_SCALAR_KIND_CHANGED #/M/2"}},
		{name: "map value name qualified", old: p3("message M { map<string, S> m = 2; message S { string s = 1; } }"),
			new: p3("message M { map<string, M.S> m = 2; message S { string s = 1; } }"), ok: true},
		{name: "message label changed", old: p3("message M { optional S s = 2; message S { string s = 1; } }"),
			new: p3("message M { repeated S s = 2; message S { string s = 1; } }"), ok: true},
		{name: "string label changed", old: p3("message M { optional string s = 1; }"), new: p3("message M { repeated string s = 1; }"),
			changes: []string{"FIELD_STRING_OR_BYTES_LABEL_CHANGED #/M/1"}, ok: true},
		{name: "numeric label changed", old: p3("message M { optional int32 n = 1; }"), new: p3("message M { repeated int32 n = 1; }"),
			changes: []string{"FIELD_NUMERIC_LABEL_CHANGED #/M/1"}, fwd: "breaking"},
		{name: "implicit numeric made repeated", old: p3("message M { int32 n = 1; }"), new: p3("message M { repeated int32 n = 1; }"),
			changes: []string{"FIELD_NUMERIC_LABEL_CHANGED #/M/1"}, fwd: "breaking"},
		{name: "message added", old: p3("message M { string s = 1; }"), new: p3("message M { string s = 1; }\nmessage M2 { string s = 1; }"),
			changes: []string{"MESSAGE_ADDED #/M2"}, ok: true, fwd: "breaking"},
		{name: "messages reordered", old: p3("message A { string s = 1; }\nmessage B { string s = 1; }"), new: p3("message B { string s = 1; }\nmessage A { string s = 1; }"),
			changes: []string{"MESSAGE_MOVED #/A", "MESSAGE_MOVED #/B"}, ok: true},
		{name: "enum value renamed", old: p3("message M { Status s = 1; }\nenum Status { ACTIVE = 0; INACTIVE = 1; }"),
			new: p3("message M { Status s = 1; }\nenum Status { ACTIVE = 0; NOT_ACTIVE = 1; }"), changes: []string{"ENUM_CONST_CHANGED #/Status/1"}, ok: true},
		{name: "enum value added", old: p3("enum E { A = 0; }"), new: p3("enum E { A = 0; B = 1; }"), changes: []string{"ENUM_CONST_ADDED #/E/1"}, ok: true, fwd: "ok"},
		{name: "proto3 optional is not a oneof", old: p3("message M { optional int32 a = 1; }"), new: p3("message M { optional int32 a = 1; int32 b = 2; }"),
			changes: []string{"FIELD_ADDED #/M/2"}, ok: true},
		{name: "recursive message", old: p3("message N { N next = 1; int32 v = 2; }"), new: p3("message N { N next = 1; string v = 2; }"),
			changes: []string{"FIELD_SCALAR_KIND_CHANGED #/N/2"}},
	})
}

// Packages and imports: imports resolve through references (Dependency),
// and a message is compared by its name within its own file's package.
func TestProtobufPackagesAndImports(t *testing.T) {
	home := func(pkg, idType string) []Dependency {
		return []Dependency{{Name: "g.proto", Schema: p3("package " + pkg + ";\nmessage Home { " + idType + " id = 1; bool on = 2; }")}}
	}
	nested := func(pkg, idType string) []Dependency {
		return []Dependency{{Name: "g.proto", Schema: p3("package " + pkg + ";\nmessage outer { message Home { " + idType + " id = 1; bool on = 2; } }")}}
	}
	uses := func(typ string) string { return p3("import \"g.proto\";\nmessage M { " + typ + " h = 1; }") }
	local := p3("message M { Home h = 1; }\nmessage Home { int32 id = 1; bool on = 2; }")
	wkt := func(typ string) string {
		return p3("import \"google/protobuf/timestamp.proto\";\nimport \"google/protobuf/duration.proto\";\nmessage M { " + typ + " t = 1; }")
	}
	runCompare(t, Protobuf, []cmpCase{
		// Confluent reads no package on the wire (messages are found by
		// index), so a package change alone is compatible...
		{name: "package added", old: p3("message M { string s = 1; }"), new: p3("package foo;\nmessage M { string s = 1; }"),
			changes: []string{"PACKAGE_CHANGED #/"}, ok: true, fwd: "ok"},
		// ...and does not hide a change of the messages it holds.
		{name: "package changed with a message changed", old: p3("package foo;\nmessage M { Sub s = 1; }\nmessage Sub { int32 x = 1; }"),
			new:     p3("package bar;\nmessage M { Sub s = 1; }\nmessage Sub { string x = 1; }"),
			changes: []string{"PACKAGE_CHANGED #/", "FIELD_SCALAR_KIND_CHANGED #/Sub/1", "FIELD_NAMED_TYPE_CHANGED #/M/1"}, fwd: "breaking"},
		// A message moved into another is another name (Confluent's
		// MESSAGE_MOVED is a reordering within one scope).
		{name: "message nested into another", old: p3("message M { Sub s = 1; }\nmessage Sub { int32 x = 1; }"),
			new:     p3("message M { Sub s = 1; message Sub { int32 x = 1; } }"),
			changes: []string{"MESSAGE_REMOVED #/Sub", "MESSAGE_ADDED #/M/Sub", "FIELD_NAMED_TYPE_CHANGED #/M/1"}, fwd: "breaking"},
		{name: "nested messages reordered", old: p3("message M { message A { int32 x = 1; } message B { int32 x = 1; } }"),
			new: p3("message M { message B { int32 x = 1; } message A { int32 x = 1; } }"), changes: []string{"MESSAGE_MOVED #/M/A", "MESSAGE_MOVED #/M/B"}, ok: true, fwd: "ok"},
		{name: "field renamed", old: p3("message M { int32 a = 1; }"), new: p3("message M { int32 b = 1; }"),
			changes: []string{"FIELD_NAME_CHANGED #/M/1"}, ok: true, fwd: "ok"},

		{name: "imported message in another package", old: uses(".d1.Home"), oldDeps: home("d1", "int32"),
			new: uses(".d2.Home"), newDeps: home("d2", "int32"), ok: true, fwd: "ok"},
		{name: "imported message changed", old: uses(".d1.Home"), oldDeps: home("d1", "int32"),
			new: uses(".d1.Home"), newDeps: home("d1", "string"), changes: []string{"FIELD_SCALAR_KIND_CHANGED #/Home/1", "FIELD_NAMED_TYPE_CHANGED #/M/1"}, fwd: "breaking"},
		{name: "nested imported message in another package", old: uses(".d1.outer.Home"), oldDeps: nested("d1", "int32"),
			new: uses(".d2.outer.Home"), newDeps: nested("d2", "int32"), ok: true, fwd: "ok"},
		{name: "nested imported message changed in another package", old: uses(".d1.outer.Home"), oldDeps: nested("d1", "int32"),
			new: uses(".d2.outer.Home"), newDeps: nested("d2", "string"), changes: []string{"FIELD_SCALAR_KIND_CHANGED #/outer/Home/1", "FIELD_NAMED_TYPE_CHANGED #/M/1"}},
		{name: "imported message renamed", old: uses(".d1.Home"), oldDeps: home("d1", "int32"),
			new: uses(".d1.outer.Home"), newDeps: nested("d1", "int32"), changes: []string{"FIELD_NAMED_TYPE_CHANGED #/M/1"}},
		{name: "message moved into an import", old: local, new: uses(".d1.Home"), newDeps: home("d1", "int32"),
			changes: []string{"MESSAGE_REMOVED #/Home"}, fwd: "ok"},
		{name: "message moved out of an import", old: uses(".d1.Home"), oldDeps: home("d1", "int32"), new: local,
			changes: []string{"MESSAGE_ADDED #/Home"}, ok: true, fwd: "breaking"},
		// The well-known types need no reference.
		{name: "well-known field added", old: wkt("string"), new: p3("import \"google/protobuf/timestamp.proto\";\nmessage M { string t = 1; google.protobuf.Timestamp at = 2; }"),
			changes: []string{"FIELD_ADDED #/M/2"}, ok: true, fwd: "ok"},
		{name: "well-known type changed", old: wkt("google.protobuf.Timestamp"), new: wkt("google.protobuf.Duration"),
			changes: []string{"FIELD_NAMED_TYPE_CHANGED #/M/1"}, fwd: "breaking"},
	})
}

// An import needs a reference of that name, except the well-known types.
func TestProtobufImportNeedsReference(t *testing.T) {
	text := p3("import \"g.proto\";\nmessage M { d.Home h = 1; }")
	if _, err := Parse(Protobuf, text, nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "g.proto") {
		t.Fatalf("import without a reference: %v", err)
	}
	deps := []Dependency{{Name: "other.proto", Schema: p3("package d;\nmessage Home { int32 id = 1; }")}}
	if _, err := Parse(Protobuf, text, deps); !errors.Is(err, ErrInvalid) {
		t.Fatalf("import with another reference: %v", err)
	}
	deps[0].Name = "g.proto"
	if _, err := Parse(Protobuf, text, deps); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(Protobuf, p3("import \"google/protobuf/any.proto\";\nmessage M { google.protobuf.Any a = 1; }"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestProtobufBufCategories(t *testing.T) {
	o, _ := Parse(Protobuf, p3("message M { int32 n = 1; string s = 2; }"), nil)
	n, _ := Parse(Protobuf, p3("message M { string n = 1; string t = 2; }"), nil)
	cats := map[string]string{}
	for _, d := range Diff(o, n) {
		cats[d.Rule] = d.Category
	}
	if cats["FIELD_SCALAR_KIND_CHANGED"] != "WIRE" || cats["FIELD_NAME_CHANGED"] != "WIRE_JSON" {
		t.Fatalf("buf categories: %v", cats)
	}
}
