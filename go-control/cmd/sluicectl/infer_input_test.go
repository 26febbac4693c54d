package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

func TestParseInputForms(t *testing.T) {
	for _, c := range []struct {
		spec, dtype, dims string
		data              []byte
	}{
		{"x=@1.5", "f32", "[]", le32(math.Float32bits(1.5))},
		{"x=@[[1,2]]", "f32", "[1 2]", append(le32(math.Float32bits(1)), le32(math.Float32bits(2))...)},
		{"x:i32=@[-1]", "i32", "[1]", le32(0xffffffff)},
		{"x=@[true]", "bool", "[1]", []byte{1}},
		{"x:bool=@[0,1]", "bool", "[2]", []byte{0, 1}},
		{"x:u64=@18446744073709551615", "u64", "[]", []byte{255, 255, 255, 255, 255, 255, 255, 255}},
		{`x=@{"dtype":"u8","shape":[2,1],"data":[[3],[4]]}`, "u8", "[2 1]", []byte{3, 4}},
		{"x:bf16=@[1]", "bf16", "[1]", []byte{0x80, 0x3f}},
		{"x=@[[],[]]", "f32", "[2 0]", []byte{}},
	} {
		tn, err := parseInput(c.spec)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if tn.Name != "x" || tn.DType.String() != c.dtype || fmt.Sprint(tn.Dims) != c.dims || string(tn.Data) != string(c.data) {
			t.Errorf("%s: %s %v % x", c.spec, tn.DType, tn.Dims, tn.Data)
		}
	}
	for spec, want := range map[string]string{
		"x:u8=@256":      "does not fit",
		"x:i8=@1.5":      "does not fit",
		"x=@[1,true]":    "bool in a f32",
		"x=@[[1],[2,3]]": "ragged",
		`x=@{"dtype":"f32","shape":[3],"data":[1]}`: "holds 3 elements",
		`x=@{"data":[1],"extra":1}`:                 "unknown key",
		`x:i64=@{"dtype":"f32","data":[1]}`:         "on the command line",
		"x=@[[[[[[[[[1]]]]]]]]]":                    "rank above",
		"x=@nope":                                   "bad JSON",
		"x=@1 2":                                    "more than one value",
		`x=@"s"`:                                    "not a number",
	} {
		if _, err := parseInput(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}

func TestConvert(t *testing.T) {
	f64 := func(v ...float64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return b
	}
	got, err := convert(f64(1, -2.5), wire.F64, wire.F32)
	if err != nil || math.Float32frombits(binary.LittleEndian.Uint32(got[4:])) != -2.5 {
		t.Fatal(got, err)
	}
	if got, err := convert(f64(3, -4), wire.F64, wire.I8); err != nil || got[0] != 3 || int8(got[1]) != -4 {
		t.Fatal(got, err)
	}
	if _, err := convert(f64(0.5), wire.F64, wire.I32); err == nil {
		t.Fatal("0.5 became an integer")
	}
	if _, err := convert(f64(300), wire.F64, wire.U8); err == nil {
		t.Fatal("300 fit a u8")
	}
	if got, err := convert([]byte{0xff}, wire.I8, wire.I64); err != nil || int64(binary.LittleEndian.Uint64(got)) != -1 {
		t.Fatal(got, err)
	}
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func TestOutputsJSON(t *testing.T) {
	f32 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	resp := &sluice.Response{Model: "m", ModelVersion: "1", Outputs: []sluice.Output{
		{Name: "f", DType: wire.F32, Dims: []uint64{2, 2}, Data: f32(0.1, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)))},
		{Name: "i", DType: wire.I64, Dims: []uint64{}, Data: binary.LittleEndian.AppendUint64(nil, 1<<63)},
		{Name: "h", DType: wire.F16, Dims: []uint64{1}, Data: []byte{0x00, 0xbc}},
	}}
	out := string(outputsJSON(resp, 12))
	for _, want := range []string{
		`"f": {"dtype": "f32", "shape": [2, 2], "data": [[0.1, "NaN"], ["Infinity", "-Infinity"]]}`,
		`"i": {"dtype": "i64", "shape": [], "data": -9223372036854775808}`,
		`"h": {"dtype": "f16", "shape": [1], "data": [-1]}`,
		`"latency_us": 12`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}
