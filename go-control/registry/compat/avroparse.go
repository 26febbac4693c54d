package compat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// An Avro schema is read as Apache Avro's Java parser (the one Confluent's
// registry and its Java clients use) reads it, so that the registry takes
// exactly the schemas they take: JSON with // and /* */ comments, a
// "type" that is a string, names of [A-Za-z_][A-Za-z0-9_]* that are not
// primitive type names, fixed sizes that are non-negative 32-bit integers,
// "order" one of ascending, descending or ignore, defaults valid for their
// type (any branch of a union), a named type defined twice only if both
// definitions are the same, nothing after the schema.

var avroPrimitives = map[string]bool{"null": true, "boolean": true, "int": true, "long": true,
	"float": true, "double": true, "bytes": true, "string": true}

// anode is one Avro schema. Named types are shared: every reference to a
// record, enum or fixed is the same node, so recursive types are cycles.
type anode struct {
	typ string // a primitive name, record, enum, array, map, fixed or union
	// named types
	name, space string // simple name and namespace
	full        string
	aliases     []string // full names
	// record
	fields []*afield
	// enum
	symbols     []string
	enumDefault *string
	// array items, map values
	items *anode
	// fixed
	size int
	// union
	branches []*anode

	logical    string
	deprecated bool
}

type afield struct {
	name       string
	aliases    []string
	typ        *anode
	hasDefault bool
	def        any
	order      string
	pos        int
	deprecated bool
}

func (n *anode) named() bool { return n.typ == "record" || n.typ == "enum" || n.typ == "fixed" }

type avroParser struct {
	names    map[string]*anode
	defs     map[string]string // full name -> canonical JSON of its definition
	validate bool              // check defaults (registration; stored schemas are read leniently, as Confluent does)
	rewrote  bool              // an identical redefinition was replaced by its name
}

// stripJSONComments removes // and /* */ comments outside strings, as the
// Jackson parser Avro uses allows them.
func stripJSONComments(text string) (string, bool) {
	if !strings.Contains(text, "/") {
		return text, false
	}
	var b strings.Builder
	b.Grow(len(text))
	inStr, esc, changed := false, false, false
	for i := 0; i < len(text); i++ {
		ch := text[i]
		if inStr {
			b.WriteByte(ch)
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				inStr = false
			}
			continue
		}
		switch {
		case ch == '"':
			inStr = true
			b.WriteByte(ch)
		case ch == '/' && i+1 < len(text) && text[i+1] == '/':
			changed = true
			for i < len(text) && text[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case ch == '/' && i+1 < len(text) && text[i+1] == '*':
			changed = true
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				b.WriteString(text[i:]) // unterminated: let the JSON decoder refuse it
				return b.String(), true
			}
			i += end + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(ch)
		}
	}
	return b.String(), changed
}

// decodeAvroJSON decodes one JSON value and refuses anything after it.
func decodeAvroJSON(text string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("dangling content after the end of the schema")
	}
	return v, nil
}

func validAvroName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r == '_'
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// fullAvroName resolves name against space: a dotted name is full.
func fullAvroName(name, space string) (simple, ns, full string) {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return name[i+1:], name[:i], name
	}
	if space == "" {
		return name, "", name
	}
	return name, space, space + "." + name
}

func (p *avroParser) checkName(full string) error {
	parts := strings.Split(full, ".")
	for i, part := range parts {
		if !validAvroName(part) {
			if i == len(parts)-1 {
				return fmt.Errorf("illegal name %q", full)
			}
			return fmt.Errorf("illegal namespace in %q", full)
		}
	}
	if avroPrimitives[parts[len(parts)-1]] {
		return fmt.Errorf("schemas may not be named after primitives: %s", full)
	}
	return nil
}

// lookup resolves a name reference: in the enclosing namespace, then in
// the null namespace, as Avro does.
func (p *avroParser) lookup(name, space string) (*anode, bool) {
	_, _, full := fullAvroName(name, space)
	if n, ok := p.names[full]; ok {
		return n, true
	}
	n, ok := p.names[name]
	return n, ok
}

func textOf(m map[string]any, key string) (string, bool) {
	s, ok := m[key].(string)
	return s, ok
}

// parse reads v (a schema in namespace space) and returns its node and the
// value the data plane should read in its place (an identical
// redefinition becomes its name).
func (p *avroParser) parse(v any, space string, depth int) (*anode, any, error) {
	if depth > nestingDepthMax {
		return nil, v, fmt.Errorf("schema nested deeper than %d levels", nestingDepthMax)
	}
	switch t := v.(type) {
	case string:
		if avroPrimitives[t] {
			return &anode{typ: t}, v, nil
		}
		n, ok := p.lookup(t, space)
		if !ok {
			return nil, v, fmt.Errorf("undefined name: %q", t)
		}
		return n, v, nil
	case []any:
		return p.union(t, space, depth)
	case map[string]any:
		typ, ok := t["type"].(string)
		if !ok {
			return nil, v, fmt.Errorf("no type (a string) in %s", short(t))
		}
		switch typ {
		case "record", "error", "enum", "fixed":
			return p.namedType(typ, t, space, depth)
		case "array", "map":
			key := map[string]string{"array": "items", "map": "values"}[typ]
			inner, ok := t[key]
			if !ok {
				return nil, v, fmt.Errorf("%s has no %s type: %s", typ, key, short(t))
			}
			it, raw, err := p.parse(inner, space, depth+1)
			if err != nil {
				return nil, v, err
			}
			t[key] = raw
			n := &anode{typ: typ, items: it}
			n.logical, _ = textOf(t, "logicalType")
			n.deprecated, _ = t["deprecated"].(bool)
			return n, t, nil
		}
		if avroPrimitives[typ] {
			n := &anode{typ: typ}
			n.logical, _ = textOf(t, "logicalType")
			return n, t, nil
		}
		n, ok := p.lookup(typ, space)
		if !ok {
			return nil, v, fmt.Errorf("undefined name: %q", typ)
		}
		return n, t, nil
	}
	return nil, v, fmt.Errorf("schema not supported: %s", short(v))
}

func short(v any) string {
	b, _ := json.Marshal(v)
	return truncate(string(b), 120)
}

func (p *avroParser) union(list []any, space string, depth int) (*anode, any, error) {
	n := &anode{typ: "union"}
	seen := map[string]bool{}
	for i, b := range list {
		bn, raw, err := p.parse(b, space, depth+1)
		if err != nil {
			return nil, list, err
		}
		list[i] = raw
		if bn.typ == "union" {
			return nil, list, errors.New("nested union")
		}
		key := bn.typ
		if bn.named() {
			key = bn.full
		}
		if seen[key] {
			return nil, list, fmt.Errorf("duplicate in union: %s", key)
		}
		seen[key] = true
		n.branches = append(n.branches, bn)
	}
	return n, list, nil
}

func (p *avroParser) aliasesOf(m map[string]any, space string, named bool) ([]string, error) {
	raw, ok := m["aliases"]
	if !ok {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("aliases not an array: %s", short(m))
	}
	var out []string
	for _, a := range list {
		s, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("alias not a string: %s", short(a))
		}
		if named {
			_, _, s = fullAvroName(s, space)
		}
		// Avro keeps aliases in a set: one listed twice matches once.
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (p *avroParser) namedType(typ string, m map[string]any, space string, depth int) (*anode, any, error) {
	name, ok := textOf(m, "name")
	if !ok {
		return nil, m, fmt.Errorf("no name in schema: %s", short(m))
	}
	if ns, ok := m["namespace"]; ok {
		s, isStr := ns.(string)
		if !isStr && ns != nil {
			return nil, m, fmt.Errorf("namespace not a string: %s", short(m))
		}
		space = s
	}
	simple, ns, full := fullAvroName(name, space)
	if err := p.checkName(full); err != nil {
		return nil, m, err
	}
	def := canonicalJSON(m) + "\x00" + space
	if old, ok := p.names[full]; ok {
		if p.defs[full] == def {
			p.rewrote = true
			return old, full, nil // the same definition again: a reference
		}
		return nil, m, fmt.Errorf("can't redefine: %s", full)
	}
	n := &anode{typ: typ, name: simple, space: ns, full: full}
	if typ == "error" {
		n.typ = "record"
	}
	aliases, err := p.aliasesOf(m, ns, true)
	if err != nil {
		return nil, m, err
	}
	n.aliases = aliases
	n.logical, _ = textOf(m, "logicalType")
	n.deprecated, _ = m["deprecated"].(bool)
	switch n.typ {
	case "fixed":
		size, ok := m["size"].(json.Number)
		sz, err := strconv.ParseInt(string(size), 10, 32)
		if !ok || err != nil || sz < 0 {
			return nil, m, fmt.Errorf("invalid or no size (a non-negative 32-bit integer): %s", short(m))
		}
		n.size = int(sz)
	case "enum":
		syms, ok := m["symbols"].([]any)
		if !ok {
			return nil, m, fmt.Errorf("enum has no symbols: %s", short(m))
		}
		seen := map[string]bool{}
		for _, s := range syms {
			str, ok := s.(string)
			if !ok || !validAvroName(str) {
				return nil, m, fmt.Errorf("illegal enum symbol %s in %s", short(s), full)
			}
			if seen[str] {
				return nil, m, fmt.Errorf("duplicate enum symbol %s in %s", str, full)
			}
			seen[str] = true
			n.symbols = append(n.symbols, str)
		}
		if d, ok := m["default"].(string); ok {
			if !seen[d] {
				return nil, m, fmt.Errorf("the enum default %q of %s is not one of its symbols", d, full)
			}
			n.enumDefault = &d
		}
	}
	p.names[full], p.defs[full] = n, def
	if n.typ == "record" {
		if err := p.recordFields(n, m, depth); err != nil {
			return nil, m, err
		}
	}
	return n, m, nil
}

func (p *avroParser) recordFields(n *anode, m map[string]any, depth int) error {
	list, ok := m["fields"].([]any)
	if !ok {
		return fmt.Errorf("record has no fields: %s", n.full)
	}
	seen := map[string]bool{}
	for i, fv := range list {
		fm, ok := fv.(map[string]any)
		if !ok {
			return fmt.Errorf("field %d of %s is not an object", i, n.full)
		}
		name, ok := textOf(fm, "name")
		if !ok {
			return fmt.Errorf("no field name in %s: %s", n.full, short(fm))
		}
		if !validAvroName(name) {
			return fmt.Errorf("illegal field name %q in %s", name, n.full)
		}
		if seen[name] {
			return fmt.Errorf("duplicate field %s in record %s", name, n.full)
		}
		seen[name] = true
		tv, ok := fm["type"]
		if !ok {
			return fmt.Errorf("no field type: field %s of %s", name, n.full)
		}
		ft, raw, err := p.parse(tv, n.space, depth+1)
		if err != nil {
			return err
		}
		fm["type"] = raw
		f := &afield{name: name, typ: ft, pos: i, order: "ascending"}
		if o, ok := fm["order"]; ok {
			s, isStr := o.(string)
			l := strings.ToLower(s)
			if !isStr || (l != "ascending" && l != "descending" && l != "ignore") {
				return fmt.Errorf("field %s of %s: order %s is not ascending, descending or ignore", name, n.full, short(o))
			}
			f.order = l
		}
		if aliases, err := p.aliasesOf(fm, "", false); err != nil {
			return err
		} else {
			f.aliases = aliases
		}
		f.deprecated, _ = fm["deprecated"].(bool)
		if d, ok := fm["default"]; ok {
			f.hasDefault, f.def = true, d
			if (ft.typ == "float" || ft.typ == "double") && isString(d) {
				x, err := parseJavaDouble(d.(string))
				if err != nil {
					return fmt.Errorf("invalid default for field %s of %s: %s", name, n.full, short(d))
				}
				f.def = x
			}
			if p.validate && !validAvroDefault(ft, f.def, 0) {
				return fmt.Errorf("invalid default for field %s of %s: %s is not a %s", name, n.full, short(d), avroTypeName(ft, 0))
			}
		}
		n.fields = append(n.fields, f)
	}
	return nil
}

func isString(v any) bool { _, ok := v.(string); return ok }

// parseJavaDouble reads a float or double default given as text, as
// Java's Double.parseDouble does for the usual spellings.
func parseJavaDouble(s string) (float64, error) {
	switch strings.TrimSpace(s) {
	case "NaN":
		return math.NaN(), nil
	case "Infinity", "+Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "d"), "f"), 64)
}

// validAvroDefault is Avro's isValidDefault: a union default may match any
// branch, record defaults name their fields (or fall back to the field's
// own default).
func validAvroDefault(n *anode, v any, depth int) bool {
	if depth > nestingDepthMax {
		return false
	}
	switch n.typ {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "int", "long":
		num, ok := v.(json.Number)
		if !ok || strings.ContainsAny(string(num), ".eE") {
			return false
		}
		bits := 32
		if n.typ == "long" {
			bits = 64
		}
		_, err := strconv.ParseInt(string(num), 10, bits)
		return err == nil
	case "float", "double":
		switch v.(type) {
		case json.Number, float64:
			return true
		}
		return false
	case "string", "bytes", "enum", "fixed":
		return isString(v)
	case "array":
		list, ok := v.([]any)
		if !ok {
			return false
		}
		for _, x := range list {
			if !validAvroDefault(n.items, x, depth+1) {
				return false
			}
		}
		return true
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for _, x := range m {
			if !validAvroDefault(n.items, x, depth+1) {
				return false
			}
		}
		return true
	case "union":
		for _, b := range n.branches {
			if validAvroDefault(b, v, depth+1) {
				return true
			}
		}
		return false
	case "record":
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for _, f := range n.fields {
			x, has := m[f.name]
			if !has {
				if !f.hasDefault {
					return false
				}
				x = f.def
			}
			if !validAvroDefault(f.typ, x, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// avroTypeName renders a schema for messages and the contract.
func avroTypeName(n *anode, depth int) string {
	if depth > 4 {
		return "…"
	}
	switch n.typ {
	case "record", "enum", "fixed":
		return n.typ + " " + n.full
	case "array":
		return "array<" + avroTypeName(n.items, depth+1) + ">"
	case "map":
		return "map<" + avroTypeName(n.items, depth+1) + ">"
	case "union":
		parts := make([]string, len(n.branches))
		for i, b := range n.branches {
			parts[i] = avroTypeName(b, depth+1)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if n.logical != "" {
		return n.typ + "(" + n.logical + ")"
	}
	return n.typ
}

// parsingCanonicalForm renders n in Avro's Parsing Canonical Form: full
// names, only the attributes that matter to reading, in the specified
// order, each named type spelled out once.
func parsingCanonicalForm(n *anode) string {
	var b bytes.Buffer
	seen := map[string]bool{}
	var write func(n *anode, depth int)
	str := func(s string) {
		enc, _ := json.Marshal(s)
		b.Write(enc)
	}
	write = func(n *anode, depth int) {
		if depth > nestingDepthMax {
			return
		}
		switch n.typ {
		case "record", "enum", "fixed":
			if seen[n.full] {
				str(n.full)
				return
			}
			seen[n.full] = true
			b.WriteString(`{"name":`)
			str(n.full)
			b.WriteString(`,"type":`)
			str(n.typ)
			switch n.typ {
			case "record":
				b.WriteString(`,"fields":[`)
				for i, f := range n.fields {
					if i > 0 {
						b.WriteByte(',')
					}
					b.WriteString(`{"name":`)
					str(f.name)
					b.WriteString(`,"type":`)
					write(f.typ, depth+1)
					b.WriteByte('}')
				}
				b.WriteByte(']')
			case "enum":
				b.WriteString(`,"symbols":[`)
				for i, s := range n.symbols {
					if i > 0 {
						b.WriteByte(',')
					}
					str(s)
				}
				b.WriteByte(']')
			case "fixed":
				fmt.Fprintf(&b, `,"size":%d`, n.size)
			}
			b.WriteByte('}')
		case "array":
			b.WriteString(`{"type":"array","items":`)
			write(n.items, depth+1)
			b.WriteByte('}')
		case "map":
			b.WriteString(`{"type":"map","values":`)
			write(n.items, depth+1)
			b.WriteByte('}')
		case "union":
			b.WriteByte('[')
			for i, br := range n.branches {
				if i > 0 {
					b.WriteByte(',')
				}
				write(br, depth+1)
			}
			b.WriteByte(']')
		default:
			str(n.typ)
		}
	}
	write(n, 0)
	return b.String()
}
