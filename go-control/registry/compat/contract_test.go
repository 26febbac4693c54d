package compat

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "examples", "diffusion", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustParse(t *testing.T, typ Type, text string) Schema {
	t.Helper()
	s, err := Parse(typ, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func byPath(diffs []Difference) map[string]Difference {
	m := map[string]Difference{}
	for _, d := range diffs {
		m[d.Path] = d
	}
	return m
}

// The seed's example (docs/schemas.md, "Contracts"): a diffusion pipeline's
// output contract. images widened from PIL images to images-or-tensors
// reads all old data (BACKWARD compatible); latents removed from the
// closed model is breaking, unless v1 marked it deprecated, when it is a
// warning and BACKWARD registers v2.
func TestDiffusionContractExample(t *testing.T) {
	v1 := mustParse(t, JSON, readExample(t, "output-v1.json"))
	v1d := mustParse(t, JSON, readExample(t, "output-v1-deprecated.json"))
	v2 := mustParse(t, JSON, readExample(t, "output-v2.json"))

	d := byPath(Diff(v1, v2))
	images, latents := d["#/properties/images/items"], d["#/properties/latents"]
	if images.Rule != "SUM_TYPE_EXTENDED" || images.Backward != Compatible || images.Forward != Breaking {
		t.Fatalf("images: %+v", images)
	}
	if latents.Rule != "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" || latents.Backward != Breaking || latents.Forward != Breaking ||
		latents.ForwardRule != "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL" {
		t.Fatalf("latents: %+v", latents)
	}
	if len(d) != 2 {
		t.Fatalf("want exactly images and latents, got %v", d)
	}
	prev := []Version{{Version: 1, Schema: v1, Text: "v1"}}
	res := Check(Backward, v2, prev)
	if res.Compatible() || len(res.Differences) != 1 || res.Differences[0].Path != "#/properties/latents" {
		t.Fatalf("BACKWARD v1 -> v2: %+v", res)
	}

	// latents marked deprecated in v1: its removal warns.
	dd := byPath(Diff(v1d, v2))
	if l := dd["#/properties/latents"]; l.Backward != Warning || l.Forward != Warning {
		t.Fatalf("deprecated latents: %+v", l)
	}
	if i := dd["#/properties/images/items"]; i.Backward != Compatible {
		t.Fatalf("images with deprecated latents: %+v", i)
	}
	prev = []Version{{Version: 1, Schema: v1d, Text: "v1"}}
	res = Check(Backward, v2, prev)
	if !res.Compatible() || len(res.Differences) != 1 || res.Differences[0].Backward != Warning {
		t.Fatalf("BACKWARD v1(deprecated) -> v2: %+v", res)
	}
	// FORWARD still refuses v2: old consumers cannot read a tensor image.
	if res := Check(Forward, v2, prev); res.Compatible() || !strings.Contains(strings.Join(res.Messages, " "), "#/properties/images/items") {
		t.Fatalf("FORWARD v1 -> v2: %+v", res)
	}

	// The contract lists the fields with their paths, types and marks.
	c := NewContract(v1d)
	fields := map[string]Field{}
	for _, f := range c.Fields {
		fields[f.Path] = f
	}
	if f := fields["#/properties/latents"]; !f.Deprecated || !f.Required || f.Type != "array<number>" {
		t.Fatalf("latents field: %+v (%v)", f, c.Fields)
	}
	if f := fields["#/properties/images"]; f.Type != "array<#/definitions/PILImage>" {
		t.Fatalf("images field: %+v", f)
	}
	if f := fields["#/properties/images/items/properties/width"]; f.Type != "integer" || !f.Required {
		t.Fatalf("image width: %+v", f)
	}
	if !strings.HasPrefix(c.Fingerprint, "sha256:") || len(c.Fingerprint) != 7+64 || c.SchemaType != JSON {
		t.Fatalf("contract: %+v", c)
	}
}

// A removal that breaks warns instead when the old version deprecated it,
// in every format.
func TestDeprecatedRemovalWarns(t *testing.T) {
	cases := []struct {
		typ               Type
		old, deprec, new  string
		path              string
		backward, forward Verdict // of the plain removal
	}{
		{Avro, rec("U", `{"name":"id","type":"int"}`, `{"name":"old","type":"string"}`),
			rec("U", `{"name":"id","type":"int"}`, `{"name":"old","type":"string","deprecated":true}`),
			rec("U", `{"name":"id","type":"int"}`), "/fields/old", Compatible, Breaking},
		{Protobuf, p3("message M { oneof o { string a = 1; int32 b = 2; } }"),
			p3("message M { oneof o { string a = 1; int32 b = 2 [deprecated = true]; } }"),
			p3("message M { oneof o { string a = 1; } }"), "#/M/o/2", Breaking, Compatible},
		{Tensor, `{"inputs":[{"name":"x","dtype":"f32","shape":[-1]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1]},{"name":"z","dtype":"f32","shape":[-1]}]}`,
			`{"inputs":[{"name":"x","dtype":"f32","shape":[-1]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1]},{"name":"z","dtype":"f32","shape":[-1],"deprecated":true}]}`,
			`{"inputs":[{"name":"x","dtype":"f32","shape":[-1]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1]}]}`, "/outputs/z", Breaking, Compatible},
	}
	warn := func(v Verdict) Verdict {
		if v == Breaking {
			return Warning
		}
		return v
	}
	for _, c := range cases {
		o, od, n := mustParse(t, c.typ, c.old), mustParse(t, c.typ, c.deprec), mustParse(t, c.typ, c.new)
		plain := byPath(Diff(o, n))[c.path]
		if plain.Backward != c.backward || plain.Forward != c.forward {
			t.Errorf("%s plain removal: %+v", c.typ, plain)
		}
		got := byPath(Diff(od, n))[c.path]
		if got.Backward != warn(c.backward) || got.Forward != warn(c.forward) {
			t.Errorf("%s deprecated removal: %+v", c.typ, got)
		}
		for _, l := range allLevels {
			if res := Check(l, n, []Version{{1, od, c.deprec}}); !res.Compatible() {
				t.Errorf("%s %s refuses a deprecated removal: %v", c.typ, l, res.Messages)
			}
		}
	}
	// The data plane reads TENSOR signatures strictly: the mark is left
	// out of what it gets.
	s := mustParse(t, Tensor, cases[2].deprec)
	if et := EngineText(s, cases[2].deprec); strings.Contains(et, "deprecated") {
		t.Fatalf("engine text keeps the mark: %s", et)
	}
}

func TestContractFields(t *testing.T) {
	get := func(typ Type, text string) map[string]Field {
		m := map[string]Field{}
		for _, f := range NewContract(mustParse(t, typ, text)).Fields {
			m[f.Path] = f
		}
		return m
	}
	a := get(Avro, recNS("s", "U", `{"name":"id","type":"int"}`, `{"name":"home","type":`+rec("Addr", `{"name":"zip","type":["null","string"],"default":null}`)+`}`))
	if a["/fields/id"].Type != "int" || !a["/fields/id"].Required || a["/fields/home/type/fields/zip"].Type != "[null, string]" || a["/fields/home/type/fields/zip"].Required {
		t.Fatalf("avro fields: %v", a)
	}
	p := get(Protobuf, p3("package q;\nmessage M { repeated int32 n = 1; oneof o { string s = 2; } map<string, M> m = 3; }"))
	if p["#/M/1"].Type != "repeated int32" || p["#/M/1"].Name != "n" || p["#/M/o/2"].Type != "string" || p["#/M/3"].Type != "map<string, q.M>" || p["#/M"].Type != "message q.M" {
		t.Fatalf("protobuf fields: %v", p)
	}
	sig := `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"i64","shape":[-1]}]}`
	tf := get(Tensor, sig)
	if tf["/inputs/x"].Type != "f32[-1,4]" || !tf["/inputs/x"].Required || tf["/outputs/y"].Type != "i64[-1]" {
		t.Fatalf("tensor fields: %v", tf)
	}
	if c := NewContract(mustParse(t, Tensor, sig)); c.Signature == nil || c.Signature.Inputs[0].Name != "x" {
		t.Fatalf("tensor contract lacks the signature: %+v", c)
	}
}
