package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/npy"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// outputsJSON renders a response as
//
//	{"model": M, "version": V, "latency_us": N,
//	 "outputs": {"y": {"dtype": "f32", "shape": [1, 3], "data": [[...]]}}}
//
// with data nested by the shape. Integers are exact (64-bit included);
// f16 and bf16 print as their float values; NaN and infinities, which JSON
// has no numbers for, print as the strings "NaN", "Infinity", "-Infinity".
func outputsJSON(resp *sluice.Response, latencyUs int64) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"model\": %s,\n  \"version\": %s,\n  \"latency_us\": %d,\n  \"outputs\": {",
		strconv.Quote(resp.Model), strconv.Quote(resp.ModelVersion), latencyUs)
	for i, o := range resp.Outputs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n    %s: {\"dtype\": %q, \"shape\": %s, \"data\": ", strconv.Quote(o.Name), o.DType.String(), dimsJSON(o.Dims))
		idx := 0
		writeNested(&b, o, o.Dims, &idx)
		b.WriteByte('}')
	}
	b.WriteString("\n  }\n}\n")
	return b.Bytes()
}

func dimsJSON(d []uint64) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = strconv.FormatUint(x, 10)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

func writeNested(b *bytes.Buffer, o sluice.Output, dims []uint64, idx *int) {
	if len(dims) == 0 {
		writeElement(b, o, *idx)
		*idx++
		return
	}
	b.WriteByte('[')
	for i := uint64(0); i < dims[0]; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		writeNested(b, o, dims[1:], idx)
	}
	b.WriteByte(']')
}

func writeElement(b *bytes.Buffer, o sluice.Output, i int) {
	f, n, u, kind := element(o.Data, o.DType, i)
	switch kind {
	case 'f':
		switch {
		case math.IsNaN(f):
			b.WriteString(`"NaN"`)
		case math.IsInf(f, 1):
			b.WriteString(`"Infinity"`)
		case math.IsInf(f, -1):
			b.WriteString(`"-Infinity"`)
		default:
			bits := 64
			if o.DType != wire.F64 {
				bits = 32 // shortest text that reads back as the same f32
			}
			b.WriteString(strconv.FormatFloat(f, 'g', -1, bits))
		}
	case 'i':
		b.WriteString(strconv.FormatInt(n, 10))
	case 'b':
		b.WriteString(strconv.FormatBool(u != 0))
	default:
		b.WriteString(strconv.FormatUint(u, 10))
	}
}

// writeNpy writes each output to DIR/NAME.npy and returns the paths.
// Characters of a tensor name that do not belong in a file name become
// '_'. bf16 outputs are written as f32 (NumPy has no bfloat16).
func writeNpy(resp *sluice.Response, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	seen := map[string]bool{}
	for _, o := range resp.Outputs {
		base := strings.Map(func(r rune) rune {
			if r == '/' || r == '\\' || r == ':' || r == '*' || r == '?' || r == '"' || r == '<' || r == '>' || r == '|' {
				return '_'
			}
			return r
		}, o.Name)
		if base == "." || base == ".." || seen[base] {
			base = fmt.Sprintf("%s_%d", base, len(paths))
		}
		seen[base] = true
		p := filepath.Join(dir, base+".npy")
		if err := npy.WriteFile(p, &npy.Array{DType: o.DType, Shape: o.Dims, Data: o.Data}); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
