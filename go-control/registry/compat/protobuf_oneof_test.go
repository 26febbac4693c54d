package compat

import "testing"

// Oneofs, after Confluent's newest MessageSchemaDiff: fields matched by
// number whatever their oneof, each rule both ways (a pair that must pass,
// one that must not).
func TestProtobufOneofs(t *testing.T) {
	runCompare(t, Protobuf, []cmpCase{
		// Into a new oneof: one field alone is compatible, with a type
		// change or with another existing field it is not.
		{name: "field moved into a new oneof alone", old: p3("message M { string a = 1; string b = 2; }"),
			new: p3("message M { string a = 1; oneof o { string b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/o"}, ok: true, fwd: "ok"},
		{name: "field moved into a new oneof with a new field", old: p3("message M { string a = 1; string b = 2; }"),
			new: p3("message M { string a = 1; oneof o { string b = 2; int32 c = 3; } }"), changes: []string{"ONEOF_ADDED #/M/o", "ONEOF_FIELD_ADDED #/M/o/3"}, ok: true},
		{name: "field moved into a new oneof, same wire type", old: p3("message M { string a = 1; int32 b = 2; }"),
			new: p3("message M { string a = 1; oneof o { int64 b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/o", "FIELD_SCALAR_TYPE_CHANGED #/M/o/2"}, ok: true, fwd: "ok"},
		{name: "field moved into a new oneof with a type change", old: p3("message M { string a = 1; int32 b = 2; }"),
			new: p3("message M { string a = 1; oneof o { string b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/o", "FIELD_SCALAR_KIND_CHANGED #/M/o/2"}, fwd: "breaking"},
		{name: "field moved into a new oneof as a message", old: p3("message M { string a = 1; int32 b = 2; }"),
			new:     p3("message M { string a = 1; oneof o { S b = 2; } }\nmessage S { int32 v = 1; }"),
			changes: []string{"ONEOF_ADDED #/M/o", "MESSAGE_ADDED #/S", "FIELD_KIND_CHANGED #/M/o/2"}, fwd: "breaking"},
		{name: "two fields moved into a new oneof", old: p3("message M { string a = 1; string b = 2; }"),
			new: p3("message M { oneof o { string a = 1; string b = 2; int32 c = 3; } }"), changes: []string{"MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o", "ONEOF_ADDED #/M/o", "ONEOF_FIELD_ADDED #/M/o/3"}},
		{name: "two fields moved into an existing oneof", old: p3("message M { string a = 1; string b = 2; oneof o { string c = 3; } }"),
			new: p3("message M { oneof o { string a = 1; string b = 2; string c = 3; } }"), changes: []string{"MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o"}},

		// Into an existing oneof: new fields may join it, old ones may not.
		{name: "field added to a oneof", old: p3("message M { oneof o { string a = 1; string b = 2; } }"),
			new: p3("message M { oneof o { string a = 1; string b = 2; int32 c = 3; } }"), changes: []string{"ONEOF_FIELD_ADDED #/M/o/3"}, ok: true, fwd: "breaking"},
		{name: "field moved into an existing oneof", old: p3("message M { string a = 1; oneof o { string b = 2; string c = 3; } }"),
			new: p3("message M { oneof o { string a = 1; string b = 2; string c = 3; } }"), changes: []string{"FIELD_MOVED_TO_EXISTING_ONEOF #/M/o"}, fwd: "ok"},
		{name: "field moved into a renamed oneof", old: p3("message M { string a = 1; oneof o { string b = 2; string c = 3; } }"),
			new:     p3("message M { oneof o2 { string a = 1; string b = 2; string c = 3; } }"),
			changes: []string{"FIELD_MOVED_TO_EXISTING_ONEOF #/M/o2", "ONEOF_ADDED #/M/o2", "ONEOF_REMOVED #/M/o"}},
		{name: "field moved to another existing oneof", old: p3("message M { oneof a { string x = 1; string y = 2; } oneof b { string z = 3; } }"),
			new: p3("message M { oneof a { string x = 1; } oneof b { string y = 2; string z = 3; } }"), changes: []string{"FIELD_MOVED_TO_EXISTING_ONEOF #/M/b"}},
		{name: "field moved to a new oneof of its own", old: p3("message M { oneof a { string x = 1; string y = 2; } }"),
			new: p3("message M { oneof a { string x = 1; } oneof b { string y = 2; } }"), changes: []string{"ONEOF_ADDED #/M/b"}, ok: true, fwd: "breaking"},

		// Out of a oneof: the number and type stay, only the exclusivity
		// goes (Confluent's ONEOF_FIELD_MOVED_TO_TOP_LEVEL); forward, old
		// readers would see two fields set in their oneof.
		{name: "field moved out of a oneof", old: p3("message M { oneof o { string a = 1; string b = 2; } }"),
			new: p3("message M { string a = 1; oneof o { string b = 2; } }"), changes: []string{"ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/1"}, ok: true, fwd: "breaking"},
		{name: "field moved out of a oneof with a type change", old: p3("message M { oneof o { string a = 1; string b = 2; } }"),
			new: p3("message M { int32 a = 1; oneof o { string b = 2; } }"), changes: []string{"ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/1", "FIELD_SCALAR_KIND_CHANGED #/M/1"}, fwd: "breaking"},
		{name: "one-field oneof dissolved", old: p3("message M { string s = 1; oneof o { string a = 2; } }"),
			new: p3("message M { string s = 1; string a = 2; }"), changes: []string{"ONEOF_REMOVED #/M/o", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/2"}, ok: true, fwd: "ok"},

		// Renamed: oneofs match by name, fields by number, so a rename
		// alone is compatible and cannot hide what happens to the fields.
		{name: "oneof renamed", old: p3("message M { oneof o { string a = 1; int32 b = 2; } }"),
			new: p3("message M { oneof p { string a = 1; int32 b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/p", "ONEOF_REMOVED #/M/o"}, ok: true, fwd: "ok"},
		{name: "oneof renamed with a type change", old: p3("message M { oneof o { string a = 1; int32 b = 2; } }"),
			new: p3("message M { oneof p { string a = 1; string b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/p", "ONEOF_REMOVED #/M/o", "FIELD_SCALAR_KIND_CHANGED #/M/p/2"}, fwd: "breaking"},
		{name: "oneof renamed with a member dropped", old: p3("message M { oneof o { string a = 1; int32 b = 2; } }"),
			new: p3("message M { oneof p { string a = 1; } }"), changes: []string{"ONEOF_ADDED #/M/p", "ONEOF_REMOVED #/M/o", "ONEOF_FIELD_REMOVED #/M/o/2"}, fwd: "ok"},
		{name: "oneof renamed with a member added", old: p3("message M { oneof o { string a = 1; } }"),
			new: p3("message M { oneof p { string a = 1; int32 b = 2; } }"), changes: []string{"ONEOF_ADDED #/M/p", "ONEOF_REMOVED #/M/o", "ONEOF_FIELD_ADDED #/M/p/2"}, ok: true, fwd: "breaking"},

		// Removed: whole, compatible; dropping members is not.
		{name: "oneof removed whole", old: p3("message M { string s = 1; oneof o { string a = 2; int32 b = 3; } }"),
			new: p3("message M { string s = 1; }"), changes: []string{"ONEOF_REMOVED #/M/o"}, ok: true, fwd: "ok"},
		{name: "field removed from a oneof", old: p3("message M { oneof o { string a = 1; string b = 2; int32 c = 3; } }"),
			new: p3("message M { oneof o { string a = 1; string b = 2; } }"), changes: []string{"ONEOF_FIELD_REMOVED #/M/o/3"}, fwd: "ok"},
		{name: "oneof removed, one member kept", old: p3("message M { string s = 1; oneof o { string a = 2; int32 b = 3; } }"),
			new: p3("message M { string s = 1; string a = 2; }"), changes: []string{"ONEOF_REMOVED #/M/o", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL #/M/2", "ONEOF_FIELD_REMOVED #/M/o/3"}},

		// Merged: two oneofs' fields in one are newly exclusive; the
		// reverse, a split, is compatible.
		{name: "oneofs merged", old: p3("message M { oneof a { string x = 1; string y = 2; } oneof b { string z = 3; } }"),
			new: p3("message M { oneof a { string x = 1; string y = 2; string z = 3; } }"), changes: []string{"FIELD_MOVED_TO_EXISTING_ONEOF #/M/a", "ONEOF_REMOVED #/M/b"}, fwd: "ok"},
		{name: "oneofs merged under a new name", old: p3("message M { oneof a { string x = 1; } oneof b { string z = 3; } }"),
			new:     p3("message M { oneof c { string x = 1; string z = 3; } }"),
			changes: []string{"FIELD_MOVED_TO_EXISTING_ONEOF #/M/c", "ONEOF_ADDED #/M/c", "ONEOF_REMOVED #/M/a", "ONEOF_REMOVED #/M/b"}, fwd: "ok"},
		{name: "oneof split", old: p3("message M { oneof a { string x = 1; string y = 2; string z = 3; } }"),
			new: p3("message M { oneof a { string x = 1; string y = 2; } oneof b { string z = 3; } }"), changes: []string{"ONEOF_ADDED #/M/b"}, ok: true, fwd: "breaking"},

		{name: "proto3 optional is not a oneof", old: p3("message M { optional int32 a = 1; }"), new: p3("message M { int32 a = 1; }"), ok: true, fwd: "ok"},
		{name: "proto3 optional into a oneof", old: p3("message M { optional int32 a = 1; optional int32 b = 2; }"),
			new: p3("message M { oneof o { int32 a = 1; int32 b = 2; } }"), changes: []string{"MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o", "ONEOF_ADDED #/M/o"}},
	})
}

// A oneof member marked deprecated may go even while its oneof is renamed.
func TestProtobufOneofDeprecated(t *testing.T) {
	o, err := Parse(Protobuf, p3("message M { oneof o { string a = 1; string b = 2 [deprecated = true]; } }"), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Parse(Protobuf, p3("message M { oneof p { string a = 1; } }"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range Diff(o, n) {
		if d.Backward == Breaking {
			t.Fatalf("breaking: %+v", d)
		}
		if d.Rule == "ONEOF_FIELD_REMOVED" && d.Backward != Warning {
			t.Fatalf("deprecated member dropped: %+v", d)
		}
	}
}
