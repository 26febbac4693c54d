package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Avro compatibility is Apache Avro's SchemaCompatibility, which Confluent
// uses: can a reader schema decode what a writer schema wrote? Named types
// match by unqualified name or a reader alias of the writer's full name;
// a reader field matches a writer field by name or one of its aliases (a
// field whose name and aliases match more than one writer field makes
// Avro's checker fail, which Confluent answers as incompatible); a reader
// union reads a writer type when any branch does; promotions are int to
// long, float or double, long to float or double, float to double, string
// to and from bytes. Incompatibilities keep Avro's names
// (READER_FIELD_MISSING_DEFAULT_VALUE, TYPE_MISMATCH, NAME_MISMATCH,
// MISSING_ENUM_SYMBOLS, MISSING_UNION_BRANCH, FIXED_SIZE_MISMATCH); the
// changes Avro accepts get Sluice's names (FIELD_ADDED, TYPE_PROMOTED, ...).
// Paths name fields (/fields/price/type) where Avro counts positions.

type avroSchema struct {
	root      *anode
	canonical string // identity: compact JSON of the text without comments
	pcf       string // Parsing Canonical Form
	engine    string // the text the data plane compiles ("" = as registered)
}

func (*avroSchema) Type() Type          { return Avro }
func (s *avroSchema) Canonical() string { return s.canonical }

// EngineText is the schema text the data plane should compile: the
// registered text, except Avro text with comments or a repeated definition,
// which is sent as the parser read it, and a TENSOR signature with
// deprecation marks, which is sent without them.
func EngineText(s Schema, text string) string {
	switch t := s.(type) {
	case *avroSchema:
		if t.engine != "" {
			return t.engine
		}
	case *tensorSchema:
		if t.engine != "" {
			return t.engine
		}
	}
	return text
}

func compactJSON(text string) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(text)); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func parseAvro(text string, deps []Dependency, validate bool) (Schema, error) {
	p := &avroParser{names: map[string]*anode{}, defs: map[string]string{}, validate: validate}
	for _, d := range deps {
		stripped, _ := stripJSONComments(d.Schema)
		v, err := decodeAvroJSON(stripped)
		if err != nil {
			return nil, invalid("reference %q: %v", d.Name, err)
		}
		// A reference's own defaults were checked when it was registered.
		p.validate = false
		_, _, err = p.parse(v, "", 0)
		p.validate = validate
		if err != nil {
			return nil, invalid("reference %q: %v", d.Name, err)
		}
	}
	p.rewrote = false
	stripped, hadComments := stripJSONComments(text)
	v, err := decodeAvroJSON(stripped)
	if err != nil {
		return nil, invalid("%v", err)
	}
	root, raw, err := p.parse(v, "", 0)
	if err != nil {
		return nil, invalid("%v", err)
	}
	canon, err := compactJSON(stripped)
	if err != nil {
		return nil, invalid("%v", err)
	}
	s := &avroSchema{root: root, canonical: canon, pcf: parsingCanonicalForm(root)}
	if hadComments || p.rewrote {
		b, err := json.Marshal(raw)
		if err != nil {
			return nil, invalid("%v", err)
		}
		s.engine = string(b)
	}
	return s, nil
}

// ParseStored parses a schema the registry already holds. Avro defaults
// are not checked again, as Confluent reads stored schemas: a version
// registered before a check was tightened must still load.
func ParseStored(t Type, text string, deps []Dependency) (Schema, error) {
	if t == Avro {
		return parseGuarded(func() (Schema, error) { return parseAvro(text, deps, false) }, text)
	}
	return Parse(t, text, deps)
}

var avroCompatible = map[string]bool{
	"FIELD_ADDED": true, "FIELD_REMOVED": true, "FIELD_RENAMED": true, "TYPE_PROMOTED": true,
	"NAME_CHANGED": true, "ENUM_SYMBOLS_ADDED": true, "ENUM_SYMBOLS_REMOVED": true,
	"UNION_BRANCH_ADDED": true, "TYPE_CHANGED_TO_UNION": true, "TYPE_CHANGED_FROM_UNION": true,
	"FIELD_DEFAULT_CHANGED": true,
}

// actx is one direction of the Avro check: update reads what original
// wrote.
type actx struct {
	s     side
	memo  map[[2]*anode][]finding
	busy  map[[2]*anode]bool
	steps int
}

func avroCompare(original, update Schema, s side) []finding {
	o, u := original.(*avroSchema), update.(*avroSchema)
	c := &actx{s: s, memo: map[[2]*anode][]finding{}, busy: map[[2]*anode]bool{}}
	out := c.check(u.root, o.root, "")
	if c.steps > compareStepsMax {
		out = append(out, finding{path: "/", rule: "DIFF_LIMIT_EXCEEDED",
			message: fmt.Sprintf("the comparison stopped after %d schema pairs", compareStepsMax)})
	}
	for i := range out {
		if out[i].path == "" {
			out[i].path = "/"
		}
	}
	return out
}

func (c *actx) f(path, rule, format string, args ...any) finding {
	if path == "" {
		path = "/"
	}
	return finding{path: path, rule: rule, ok: avroCompatible[rule], message: fmt.Sprintf(format, args...)}
}

func okAll(fs []finding) bool { return allOK(fs) }

// check returns what reader r finds reading data of writer w at path:
// Avro's incompatibilities and the compatible changes. Pairs of named
// types are memoized, and a pair met again while being checked counts as
// compatible, as in Avro.
func (c *actx) check(r, w *anode, path string) []finding {
	c.steps++
	if c.steps > compareStepsMax {
		return nil
	}
	key := [2]*anode{r, w}
	if c.busy[key] {
		return nil
	}
	if res, ok := c.memo[key]; ok && (r.named() || w.named()) {
		return res
	}
	c.busy[key] = true
	res := c.calc(r, w, path)
	delete(c.busy, key)
	if r.named() || w.named() {
		c.memo[key] = res
	}
	return res
}

func promotes(w, r string) bool {
	switch w {
	case "int":
		return r == "long" || r == "float" || r == "double"
	case "long":
		return r == "float" || r == "double"
	case "float":
		return r == "double"
	case "string":
		return r == "bytes"
	case "bytes":
		return r == "string"
	}
	return false
}

func (c *actx) calc(r, w *anode, path string) []finding {
	if r.typ == w.typ {
		switch r.typ {
		case "array":
			return c.check(r.items, w.items, path+"/items")
		case "map":
			return c.check(r.items, w.items, path+"/values")
		case "fixed":
			out := c.names(r, w, path)
			if r.size != w.size {
				out = append(out, c.f(path+"/size", "FIXED_SIZE_MISMATCH", "the size of the fixed type '%s' is %d in the %s schema and %d in the %s schema",
					r.full, r.size, c.s.upd, w.size, c.s.orig))
			}
			return out
		case "enum":
			return append(c.names(r, w, path), c.enum(r, w, path)...)
		case "record":
			return append(c.names(r, w, path), c.record(r, w, path)...)
		case "union":
			return c.unions(r, w, path)
		}
		return nil
	}
	if w.typ == "union" {
		// Every branch the writer may have chosen must be readable.
		var out []finding
		for i, b := range w.branches {
			out = append(out, c.check(r, b, fmt.Sprintf("%s/%d", path, i))...)
		}
		if okAll(out) {
			out = append(out, c.f(path, "TYPE_CHANGED_FROM_UNION", "the %s schema reads the union %s of the %s schema as %s",
				c.s.upd, avroTypeName(w, 0), c.s.orig, avroTypeName(r, 0)))
		}
		return out
	}
	if r.typ == "union" {
		for _, b := range r.branches {
			if sub := c.check(b, w, path); okAll(sub) {
				return append(sub, c.f(path, "TYPE_CHANGED_TO_UNION", "the %s schema reads the %s of the %s schema with its union %s",
					c.s.upd, avroTypeName(w, 0), c.s.orig, avroTypeName(r, 0)))
			}
		}
		return []finding{c.f(path, "MISSING_UNION_BRANCH", "the %s schema is missing a type inside a union field at path '%s' in the %s schema: it has no branch for %s",
			c.s.upd, orRoot(path), c.s.orig, avroTypeName(w, 0))}
	}
	if promotes(w.typ, r.typ) {
		return []finding{c.f(path, "TYPE_PROMOTED", "the %s of the %s schema is read as %s by the %s schema", w.typ, c.s.orig, r.typ, c.s.upd)}
	}
	return []finding{c.f(path, "TYPE_MISMATCH", "the type (path '%s') of a field in the %s schema does not match with the %s schema: %s cannot read %s",
		orRoot(path), c.s.upd, c.s.orig, avroTypeName(r, 0), avroTypeName(w, 0))}
}

func orRoot(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// names is Avro's name check: the unqualified names agree, or a reader
// alias is the writer's full name.
func (c *actx) names(r, w *anode, path string) []finding {
	if r.name == w.name || slices.Contains(r.aliases, w.full) {
		if r.full != w.full {
			return []finding{c.f(path+"/name", "NAME_CHANGED", "the %s '%s' of the %s schema is read as '%s' by the %s schema", w.typ, w.full, c.s.orig, r.full, c.s.upd)}
		}
		return nil
	}
	return []finding{c.f(path+"/name", "NAME_MISMATCH", "the name of the schema has changed (path '%s'): '%s' in the %s schema, '%s' in the %s schema, and no alias of the %s schema names it",
		path+"/name", w.full, c.s.orig, r.full, c.s.upd, c.s.upd)}
}

func (c *actx) enum(r, w *anode, path string) []finding {
	var missing, added []string
	for _, s := range w.symbols {
		if !slices.Contains(r.symbols, s) {
			missing = append(missing, s)
		}
	}
	for _, s := range r.symbols {
		if !slices.Contains(w.symbols, s) {
			added = append(added, s)
		}
	}
	var out []finding
	if len(added) > 0 {
		out = append(out, c.f(path+"/symbols", "ENUM_SYMBOLS_ADDED", "the %s schema adds the symbols %v to '%s'", c.s.upd, added, r.full))
	}
	if len(missing) > 0 {
		if r.enumDefault != nil {
			out = append(out, c.f(path+"/symbols", "ENUM_SYMBOLS_REMOVED", "the %s schema lacks the symbols %v of '%s' and reads them as its default %s",
				c.s.upd, missing, w.full, *r.enumDefault))
		} else {
			out = append(out, c.f(path+"/symbols", "MISSING_ENUM_SYMBOLS", "the %s schema is missing enum symbols '%v' at path '%s/symbols' in the %s schema",
				c.s.upd, missing, orRoot(path), c.s.orig))
		}
	}
	return out
}

func (c *actx) record(r, w *anode, path string) []finding {
	var out []finding
	used := make(map[*afield]bool, len(w.fields))
	byName := make(map[string]*afield, len(w.fields))
	for _, wf := range w.fields {
		byName[wf.name] = wf
	}
	for _, rf := range r.fields {
		fpath := path + "/fields/" + rf.name
		// Avro's lookupWriterField: the field's name and each alias (an
		// alias naming the field itself counts twice, as in Avro).
		var matches []*afield
		if wf := byName[rf.name]; wf != nil {
			matches = append(matches, wf)
		}
		for _, name := range rf.aliases {
			if wf := byName[name]; wf != nil {
				matches = append(matches, wf)
			}
		}
		switch {
		case len(matches) > 1:
			out = append(out, c.f(fpath, "READER_FIELD_MATCHES_MULTIPLE_WRITER_FIELDS",
				"the field '%s' of the %s schema matches %d fields of the %s schema by its name and aliases, which Avro's checker refuses",
				rf.name, c.s.upd, len(matches), c.s.orig))
			for _, m := range matches {
				used[m] = true
			}
		case len(matches) == 0:
			switch {
			case rf.hasDefault:
				out = append(out, c.f(fpath, "FIELD_ADDED", "the %s schema has the field '%s' (%s) with a default, which the %s schema lacks",
					c.s.upd, rf.name, avroTypeName(rf.typ, 0), c.s.orig))
			case rf.typ.typ == "enum" && rf.typ.enumDefault != nil:
				// Avro then checks the enum against the writer's record.
				out = append(out, c.check(rf.typ, w, fpath+"/type")...)
			default:
				out = append(out, c.f(fpath, "READER_FIELD_MISSING_DEFAULT_VALUE",
					"the field '%s' at path '%s' in the %s schema has no default value and is missing in the %s schema",
					rf.name, fpath, c.s.upd, c.s.orig))
			}
		default:
			wf := matches[0]
			used[wf] = true
			if wf.name != rf.name {
				out = append(out, c.f(fpath, "FIELD_RENAMED", "the field '%s' of the %s schema is read as '%s' (an alias) by the %s schema", wf.name, c.s.orig, rf.name, c.s.upd))
			}
			out = append(out, c.check(rf.typ, wf.typ, fpath+"/type")...)
		}
	}
	for _, wf := range w.fields {
		if !used[wf] {
			out = append(out, c.f(path+"/fields/"+wf.name, "FIELD_REMOVED", "the %s schema has no field '%s' (%s) of the %s schema: readers skip it",
				c.s.upd, wf.name, avroTypeName(wf.typ, 0), c.s.orig))
		}
	}
	return out
}

// unions: each writer branch must be read by some reader branch; reader
// branches that read none of the writer's are additions.
func (c *actx) unions(r, w *anode, path string) []finding {
	var out []finding
	usedR := make([]bool, len(r.branches))
	for i, wb := range w.branches {
		bpath := fmt.Sprintf("%s/%d", path, i)
		found := false
		for j, rb := range r.branches {
			if sub := c.check(rb, wb, bpath); okAll(sub) {
				out = append(out, sub...)
				usedR[j], found = true, true
				break
			}
		}
		if !found {
			out = append(out, c.f(bpath, "MISSING_UNION_BRANCH", "the %s schema is missing a type inside a union field at path '%s' in the %s schema: no branch reads %s",
				c.s.upd, bpath, c.s.orig, avroTypeName(wb, 0)))
		}
	}
	var added []string
	for j, rb := range r.branches {
		if !usedR[j] {
			added = append(added, avroTypeName(rb, 0))
		}
	}
	if len(added) > 0 {
		out = append(out, c.f(path, "UNION_BRANCH_ADDED", "the %s schema's union has branches %v the %s schema does not write", c.s.upd, added, c.s.orig))
	}
	return out
}

// avroFields lists the fields of every record reachable from the root, by
// the paths their differences use.
func avroFields(w *fieldWalker, s *avroSchema) {
	seen := map[*anode]bool{}
	var walk func(n *anode, path string, depth int)
	walk = func(n *anode, path string, depth int) {
		if w.full() || depth > nestingDepthMax || seen[n] {
			return
		}
		switch n.typ {
		case "record":
			seen[n] = true
			for _, f := range n.fields {
				fp := path + "/fields/" + f.name
				w.add(Field{Path: fp, Name: f.name, Type: avroTypeName(f.typ, 0), Required: !f.hasDefault,
					Deprecated: f.deprecated || f.typ.deprecated})
				walk(f.typ, fp+"/type", depth+1)
			}
			delete(seen, n)
		case "array":
			walk(n.items, path+"/items", depth+1)
		case "map":
			walk(n.items, path+"/values", depth+1)
		case "union":
			for i, b := range n.branches {
				walk(b, fmt.Sprintf("%s/%d", path, i), depth+1)
			}
		}
	}
	root := s.root
	w.add(Field{Path: "/", Name: strings.TrimPrefix(root.full, root.space+"."), Type: avroTypeName(root, 0), Deprecated: root.deprecated})
	walk(root, "", 0)
}
