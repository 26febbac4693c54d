package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// TENSOR signatures describe what a model endpoint accepts and returns:
//
//	{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],
//	 "outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}
//
// A dim of -1 is dynamic. Reading means "serving": reader R can read writer W
// when a server built for R accepts every request a client of W sends, and
// a client of W accepts every reply R's server returns. Rules:
//   - every input of W exists in R (TENSOR_INPUT_REMOVED) and every input
//     of R exists in W (TENSOR_INPUT_ADDED): inputs are positional by name
//     and a missing or unknown tensor fails the request;
//   - same dtype (TENSOR_DTYPE_CHANGED) and rank (TENSOR_RANK_CHANGED);
//   - a fixed dim in R must be the same fixed dim in W; R may relax a dim
//     to -1 (TENSOR_DIM_NARROWED otherwise);
//   - every output of W exists in R (TENSOR_OUTPUT_REMOVED), with the same
//     dtype and rank, and R's output dims must fit W's (W's -1 takes any).
//     Outputs R adds are ignored by W's clients.
//
// So under BACKWARD (R = new) a dim may go from 4 to -1 on an input but not
// the reverse; FORWARD is the converse; FULL allows only changes that narrow
// nothing in either direction (e.g. adding an output is still fine one way).

// DTypes are the tensor element types the data plane knows.
var DTypes = []string{"f32", "f16", "bf16", "f64", "i8", "u8", "i16", "u16", "i32", "i64", "u32", "u64", "bool"}

const (
	tensorCountMax     = 64 // tensors per side of a signature
	tensorRankMax      = 8  // dims per tensor
	tensorNameBytesMax = 255
)

type TensorSpec struct {
	Name  string  `json:"name"`
	DType string  `json:"dtype"`
	Shape []int64 `json:"shape"`
	// Deprecated marks a tensor that will go: removing it is a warning,
	// not a breaking change. The data plane does not read it.
	Deprecated bool `json:"deprecated,omitempty"`
}

type TensorSignature struct {
	Inputs  []TensorSpec `json:"inputs"`
	Outputs []TensorSpec `json:"outputs"`
}

type tensorSchema struct {
	sig       TensorSignature
	canonical string
	engine    string // the signature without deprecation marks, when it has any
}

func (*tensorSchema) Type() Type          { return Tensor }
func (s *tensorSchema) Canonical() string { return s.canonical }

// Signature returns the parsed signature of a TENSOR schema.
func Signature(s Schema) (TensorSignature, bool) {
	t, ok := s.(*tensorSchema)
	if !ok {
		return TensorSignature{}, false
	}
	return t.sig, true
}

func parseTensor(text string) (Schema, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	var sig TensorSignature
	if err := dec.Decode(&sig); err != nil {
		return nil, invalid("tensor signature: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("tensor signature: trailing data after the JSON object")
	}
	if len(sig.Inputs) == 0 {
		return nil, invalid("tensor signature: no inputs")
	}
	for side, list := range map[string][]TensorSpec{"inputs": sig.Inputs, "outputs": sig.Outputs} {
		if len(list) > tensorCountMax {
			return nil, invalid("tensor signature: %d %s, more than the limit of %d", len(list), side, tensorCountMax)
		}
		seen := map[string]bool{}
		for i, t := range list {
			where := fmt.Sprintf("/%s/%d", side, i)
			if t.Name == "" || len(t.Name) > tensorNameBytesMax {
				return nil, invalid("tensor signature %s: name must be 1..%d bytes", where, tensorNameBytesMax)
			}
			if seen[t.Name] {
				return nil, invalid("tensor signature %s: duplicate name %q", where, t.Name)
			}
			seen[t.Name] = true
			if !slices.Contains(DTypes, t.DType) {
				return nil, invalid("tensor signature %s: unknown dtype %q (want one of %v)", where, t.DType, DTypes)
			}
			if t.Shape == nil {
				return nil, invalid("tensor signature %s: missing shape", where)
			}
			if len(t.Shape) > tensorRankMax {
				return nil, invalid("tensor signature %s: rank %d above the limit of %d", where, len(t.Shape), tensorRankMax)
			}
			for j, d := range t.Shape {
				if d < -1 {
					return nil, invalid("tensor signature %s/shape/%d: dim %d (want -1 for dynamic or >= 0)", where, j, d)
				}
			}
		}
	}
	canon, err := json.Marshal(sig)
	if err != nil {
		return nil, invalid("tensor signature: %v", err)
	}
	ts := &tensorSchema{sig: sig, canonical: string(canon)}
	plain := TensorSignature{Inputs: undeprecated(sig.Inputs), Outputs: undeprecated(sig.Outputs)}
	if b, err := json.Marshal(plain); err == nil && string(b) != ts.canonical {
		ts.engine = string(b)
	}
	return ts, nil
}

func undeprecated(list []TensorSpec) []TensorSpec {
	out := make([]TensorSpec, len(list))
	for i, t := range list {
		t.Deprecated = false
		out[i] = t
	}
	return out
}

func findTensor(list []TensorSpec, name string) (TensorSpec, bool) {
	for _, t := range list {
		if t.Name == name {
			return t, true
		}
	}
	return TensorSpec{}, false
}

func tensorString(t TensorSpec) string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = fmt.Sprint(d)
	}
	return t.DType + "[" + strings.Join(dims, ",") + "]"
}

var tensorCompatible = map[string]bool{"TENSOR_OUTPUT_ADDED": true, "TENSOR_DIM_RELAXED": true, "TENSOR_DIM_FIXED": true}

// tensorCompare: update (the reader) serves the clients of original (the
// writer).
func tensorCompare(original, update Schema, s side) []finding {
	r, w := update.(*tensorSchema), original.(*tensorSchema)
	var out []finding
	add := func(rule, path, format string, args ...any) {
		out = append(out, finding{path: path, rule: rule, ok: tensorCompatible[rule], message: fmt.Sprintf(format, args...)})
	}
	// shapes checks that values accepted by acc cover those produced by
	// prod; relaxed names the compatible rule for a fixed dim acc takes as
	// dynamic.
	shapes := func(path string, acc, prod TensorSpec, accWho, prodWho, relaxed string) {
		if acc.DType != prod.DType {
			add("TENSOR_DTYPE_CHANGED", path+"/dtype", "tensor '%s' has dtype %s in the %s schema but %s in the %s schema",
				acc.Name, acc.DType, accWho, prod.DType, prodWho)
		}
		if len(acc.Shape) != len(prod.Shape) {
			add("TENSOR_RANK_CHANGED", path+"/shape", "tensor '%s' has rank %d in the %s schema but %d in the %s schema",
				acc.Name, len(acc.Shape), accWho, len(prod.Shape), prodWho)
			return
		}
		for i := range acc.Shape {
			a, p := acc.Shape[i], prod.Shape[i]
			switch {
			case a == p:
			case a == -1:
				add(relaxed, fmt.Sprintf("%s/shape/%d", path, i), "dim %d of tensor '%s' is dynamic in the %s schema and %d in the %s schema",
					i, acc.Name, accWho, p, prodWho)
			default:
				add("TENSOR_DIM_NARROWED", fmt.Sprintf("%s/shape/%d", path, i),
					"dim %d of tensor '%s' is %d in the %s schema, which does not accept %s from the %s schema",
					i, acc.Name, a, accWho, dimString(p), prodWho)
			}
		}
	}
	for _, wi := range w.sig.Inputs {
		path := "/inputs/" + wi.Name
		ri, ok := findTensor(r.sig.Inputs, wi.Name)
		if !ok {
			add("TENSOR_INPUT_REMOVED", path, "input '%s' (%s) of the %s schema is missing in the %s schema, which refuses requests that carry it",
				wi.Name, tensorString(wi), s.orig, s.upd)
			continue
		}
		shapes(path, ri, wi, s.upd, s.orig, "TENSOR_DIM_RELAXED")
	}
	for _, ri := range r.sig.Inputs {
		if _, ok := findTensor(w.sig.Inputs, ri.Name); !ok {
			add("TENSOR_INPUT_ADDED", "/inputs/"+ri.Name, "input '%s' (%s) required by the %s schema is missing in the %s schema",
				ri.Name, tensorString(ri), s.upd, s.orig)
		}
	}
	for _, wo := range w.sig.Outputs {
		path := "/outputs/" + wo.Name
		ro, ok := findTensor(r.sig.Outputs, wo.Name)
		if !ok {
			add("TENSOR_OUTPUT_REMOVED", path, "output '%s' (%s) expected by the %s schema is missing in the %s schema",
				wo.Name, tensorString(wo), s.orig, s.upd)
			continue
		}
		shapes(path, wo, ro, s.orig, s.upd, "TENSOR_DIM_FIXED")
	}
	for _, ro := range r.sig.Outputs {
		if _, ok := findTensor(w.sig.Outputs, ro.Name); !ok {
			add("TENSOR_OUTPUT_ADDED", "/outputs/"+ro.Name, "the %s schema adds the output '%s' (%s), which clients of the %s schema ignore",
				s.upd, ro.Name, tensorString(ro), s.orig)
		}
	}
	return out
}

func dimString(d int64) string {
	if d == -1 {
		return "a dynamic dim"
	}
	return fmt.Sprintf("%d", d)
}

func tensorFields(w *fieldWalker, s *tensorSchema) {
	for side, list := range [][]TensorSpec{s.sig.Inputs, s.sig.Outputs} {
		kind := [...]string{"inputs", "outputs"}[side]
		for _, t := range list {
			w.add(Field{Path: "/" + kind + "/" + t.Name, Name: t.Name, Type: tensorString(t), Required: side == 0, Deprecated: t.Deprecated})
		}
	}
}
