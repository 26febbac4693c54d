package compat

import "testing"

// FuzzParseAndCheck feeds arbitrary text to every parser and, when two
// inputs parse, to the checker in both directions, the diff and the
// contract: nothing may panic or hang, every schema must read itself and
// not differ from itself. `go test` runs the seeds; `go test -fuzz
// FuzzParseAndCheck` explores.
func FuzzParseAndCheck(f *testing.F) {
	seeds := []string{
		avroUser, tensorBase, jsonBaseSchema, protoWith(pFields, ""),
		`{"type":"record","name":"R","fields":[{"name":"r","type":["null","R"]}]}`,
		`{"type":"fixed","name":"F","size":-1}`,
		`{"type":"enum","name":"E","symbols":[]}`,
		`{"$ref":"#"}`,
		`{"type":"object","properties":{"a":{"$ref":"#"}},"additionalProperties":{"$ref":"#"}}`,
		`{"inputs":[{"name":"x","dtype":"f32","shape":[9223372036854775807]}]}`,
		`syntax = "proto2"; message M { optional group G = 1 { optional int32 x = 2; } }`,
		`syntax = "proto3"; message M { map<string, M> m = 1; oneof o { int32 a = 2; } }`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), s, seeds[(i+1)%len(seeds)])
	}
	f.Fuzz(func(t *testing.T, typ uint8, a, b string) {
		ty := Types[int(typ)%len(Types)]
		sa, errA := Parse(ty, a, nil)
		sb, errB := Parse(ty, b, nil)
		if errA != nil || errB != nil {
			return
		}
		CanRead(sa, sb)
		CanRead(sb, sa)
		Diff(sa, sb)
		NewContract(sa)
		// A schema does not differ from itself.
		if d := Diff(sa, sa); len(d) != 0 {
			t.Fatalf("%s schema differs from itself: %v\n%s", ty, d, a)
		}
		// Every schema reads its own data.
		if issues := CanRead(sa, sa); len(issues) != 0 {
			t.Fatalf("%s schema cannot read itself: %v\n%s", ty, issues, a)
		}
	})
}
