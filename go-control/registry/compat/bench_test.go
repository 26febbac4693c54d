package compat

import (
	"fmt"
	"strings"
	"testing"
)

// The cost of a diff for 1,000-field schemas (perf/README.md, "registry
// diff"): Diff (both directions, merged, deprecation applied) of two
// versions where 50 of 1,000 fields changed, against the baseline of
// parsing the two versions, which a registration pays anyway. Run with
// perf/registry-diff.sh.

const benchFields = 1000

// benchPair builds two versions of a 1,000-field schema: every 20th field
// changes type in the new one, and the last ten are replaced by others.
func benchPair(typ Type) (string, string) {
	var o, n []string
	for i := range benchFields {
		changed := i%20 == 0
		removed := i >= benchFields-10
		switch typ {
		case JSON:
			o = append(o, fmt.Sprintf(`"f%d":{"type":"string","maxLength":%d}`, i, 10+i%7))
			switch {
			case removed:
				n = append(n, fmt.Sprintf(`"g%d":{"type":"integer"}`, i))
			case changed:
				n = append(n, fmt.Sprintf(`"f%d":{"type":"string","maxLength":%d}`, i, 100))
			default:
				n = append(n, o[len(o)-1])
			}
		case Avro:
			o = append(o, fmt.Sprintf(`{"name":"f%d","type":"int"}`, i))
			switch {
			case removed:
				n = append(n, fmt.Sprintf(`{"name":"g%d","type":"string","default":""}`, i))
			case changed:
				n = append(n, fmt.Sprintf(`{"name":"f%d","type":"long"}`, i))
			default:
				n = append(n, o[len(o)-1])
			}
		case Protobuf:
			o = append(o, fmt.Sprintf("int32 f%d = %d;", i, i+1))
			switch {
			case removed:
				n = append(n, fmt.Sprintf("string g%d = %d;", i, i+1+benchFields))
			case changed:
				n = append(n, fmt.Sprintf("int64 f%d = %d;", i, i+1))
			default:
				n = append(n, o[len(o)-1])
			}
		}
	}
	switch typ {
	case JSON:
		wrap := func(p []string) string {
			return `{"type":"object","properties":{` + strings.Join(p, ",") + `},"required":["f1"]}`
		}
		return wrap(o), wrap(n)
	case Avro:
		wrap := func(f []string) string {
			return `{"type":"record","name":"Wide","fields":[` + strings.Join(f, ",") + `]}`
		}
		return wrap(o), wrap(n)
	}
	wrap := func(f []string) string {
		return "syntax = \"proto3\";\nmessage Wide {\n" + strings.Join(f, "\n") + "\n}\n"
	}
	return wrap(o), wrap(n)
}

var benchTypes = []Type{Avro, JSON, Protobuf}

func BenchmarkDiff1000Fields(b *testing.B) {
	for _, typ := range benchTypes {
		ot, nt := benchPair(typ)
		o, err := Parse(typ, ot, nil)
		if err != nil {
			b.Fatal(err)
		}
		n, err := Parse(typ, nt, nil)
		if err != nil {
			b.Fatal(err)
		}
		want := len(Diff(o, n))
		b.Run(string(typ), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if got := len(Diff(o, n)); got != want {
					b.Fatalf("%d differences, then %d", want, got)
				}
			}
			b.ReportMetric(float64(want), "differences")
		})
	}
}

// The baseline: parsing both versions.
func BenchmarkParse1000Fields(b *testing.B) {
	for _, typ := range benchTypes {
		ot, nt := benchPair(typ)
		b.Run(string(typ), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(typ, ot, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := Parse(typ, nt, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The benchmark's schemas differ as intended.
func TestBenchPairDiffers(t *testing.T) {
	for _, typ := range benchTypes {
		ot, nt := benchPair(typ)
		d := Diff(mustParse(t, typ, ot), mustParse(t, typ, nt))
		if len(d) < 50 {
			t.Errorf("%s: %d differences", typ, len(d))
		}
	}
}
