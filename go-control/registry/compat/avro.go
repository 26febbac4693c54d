package compat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/hamba/avro/v2"
)

type avroSchema struct {
	parsed    avro.Schema
	canonical string
}

func (*avroSchema) Type() Type          { return Avro }
func (s *avroSchema) Canonical() string { return s.canonical }

func compactJSON(text string) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(text)); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func parseAvro(text string, deps []Dependency) (Schema, error) {
	// A fresh cache per parse: the package default cache is global and would
	// let one subject's named types leak into another's.
	cache := &avro.SchemaCache{}
	for _, d := range deps {
		if _, err := avro.ParseWithCache(d.Schema, "", cache); err != nil {
			return nil, invalid("reference %q: %v", d.Name, err)
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, invalid("%v", err)
	}
	canon, err := compactJSON(text)
	if err != nil {
		// A bare primitive such as "string" (quoted) is valid JSON; anything
		// the parser accepted but JSON rejects is kept verbatim.
		canon = text
	}
	return &avroSchema{parsed: s, canonical: canon}, nil
}

type avroChecker struct {
	who    roles
	issues []Issue
	// seen breaks recursion through self-referencing named types.
	seen map[[2]string]bool
}

func avroCanRead(r, w *avroSchema, who roles) []Issue {
	c := &avroChecker{who: who, seen: map[[2]string]bool{}}
	c.check(r.parsed, w.parsed, "", 0)
	return c.issues
}

func (c *avroChecker) add(rule, path, format string, args ...any) {
	if path == "" {
		path = "/"
	}
	c.issues = append(c.issues, Issue{Rule: rule, Path: path, Description: fmt.Sprintf(format, args...)})
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

func typeName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return string(s.Type()) + " " + n.FullName()
	}
	return string(s.Type())
}

// promotable reports the Avro spec's writer→reader promotions.
func promotable(w, r avro.Type) bool {
	switch w {
	case avro.Int:
		return r == avro.Long || r == avro.Float || r == avro.Double
	case avro.Long:
		return r == avro.Float || r == avro.Double
	case avro.Float:
		return r == avro.Double
	case avro.String:
		return r == avro.Bytes
	case avro.Bytes:
		return r == avro.String
	}
	return false
}

// namesMatch follows the spec: the reader's full name or one of its aliases
// must equal the writer's full name.
func namesMatch(r, w avro.NamedSchema) bool {
	return r.FullName() == w.FullName() || slices.Contains(r.Aliases(), w.FullName())
}

// matches is the shallow test used to pick a reader union branch.
func matches(r, w avro.Schema) bool {
	r, w = deref(r), deref(w)
	if r.Type() == w.Type() {
		if rn, ok := r.(avro.NamedSchema); ok {
			return namesMatch(rn, w.(avro.NamedSchema))
		}
		return true
	}
	return promotable(w.Type(), r.Type())
}

func (c *avroChecker) check(r, w avro.Schema, path string, depth int) {
	if depth > nestingDepthMax {
		c.add("TYPE_MISMATCH", path, "schema nesting deeper than %d levels", nestingDepthMax)
		return
	}
	r, w = deref(r), deref(w)

	// A writer union: every branch the writer may have chosen must resolve.
	if wu, ok := w.(*avro.UnionSchema); ok {
		for i, branch := range wu.Types() {
			if ru, ok := r.(*avro.UnionSchema); ok {
				if !slices.ContainsFunc(ru.Types(), func(rb avro.Schema) bool { return matches(rb, branch) }) {
					c.add("MISSING_UNION_BRANCH", fmt.Sprintf("%s/%d", path, i),
						"the %s schema is missing a type inside a union field at path '%s/%d' in the %s schema: %s",
						c.who.reader, path, i, c.who.writer, typeName(branch))
					continue
				}
				c.checkAgainstUnion(ru, branch, fmt.Sprintf("%s/%d", path, i), depth)
				continue
			}
			c.check(r, branch, fmt.Sprintf("%s/%d", path, i), depth+1)
		}
		return
	}
	if ru, ok := r.(*avro.UnionSchema); ok {
		if !slices.ContainsFunc(ru.Types(), func(rb avro.Schema) bool { return matches(rb, w) }) {
			c.add("MISSING_UNION_BRANCH", path,
				"the %s schema's union at path '%s' has no branch for the %s schema's type %s",
				c.who.reader, path, c.who.writer, typeName(w))
			return
		}
		c.checkAgainstUnion(ru, w, path, depth)
		return
	}

	if r.Type() != w.Type() {
		if !promotable(w.Type(), r.Type()) {
			c.add("TYPE_MISMATCH", path,
				"the type at path '%s' in the %s schema is %s, which cannot read the %s schema's %s",
				path, c.who.reader, typeName(r), c.who.writer, typeName(w))
		}
		return
	}

	switch rs := r.(type) {
	case *avro.RecordSchema:
		ws := w.(*avro.RecordSchema)
		if !namesMatch(rs, ws) {
			c.add("NAME_MISMATCH", path+"/name",
				"the record name '%s' in the %s schema does not match '%s' in the %s schema (add an alias to rename)",
				rs.FullName(), c.who.reader, ws.FullName(), c.who.writer)
			return
		}
		key := [2]string{rs.FullName(), ws.FullName()}
		if c.seen[key] {
			return
		}
		c.seen[key] = true
		for _, rf := range rs.Fields() {
			fpath := path + "/fields/" + rf.Name()
			wf := findField(ws, rf)
			if wf == nil {
				if !rf.HasDefault() {
					c.add("READER_FIELD_MISSING_DEFAULT_VALUE", fpath,
						"the field '%s' at path '%s' in the %s schema has no default value and is missing in the %s schema",
						rf.Name(), fpath, c.who.reader, c.who.writer)
				}
				continue
			}
			c.check(rf.Type(), wf.Type(), fpath+"/type", depth+1)
		}
	case *avro.EnumSchema:
		ws := w.(*avro.EnumSchema)
		if !namesMatch(rs, ws) {
			c.add("NAME_MISMATCH", path+"/name",
				"the enum name '%s' in the %s schema does not match '%s' in the %s schema",
				rs.FullName(), c.who.reader, ws.FullName(), c.who.writer)
			return
		}
		if rs.HasDefault() {
			return
		}
		var missing []string
		for _, sym := range ws.Symbols() {
			if !slices.Contains(rs.Symbols(), sym) {
				missing = append(missing, sym)
			}
		}
		if len(missing) > 0 {
			c.add("MISSING_ENUM_SYMBOLS", path+"/symbols",
				"the %s schema is missing enum symbols %v at path '%s/symbols' in the %s schema and has no default symbol",
				c.who.reader, missing, path, c.who.writer)
		}
	case *avro.FixedSchema:
		ws := w.(*avro.FixedSchema)
		if !namesMatch(rs, ws) {
			c.add("NAME_MISMATCH", path+"/name",
				"the fixed name '%s' in the %s schema does not match '%s' in the %s schema",
				rs.FullName(), c.who.reader, ws.FullName(), c.who.writer)
			return
		}
		if rs.Size() != ws.Size() {
			c.add("FIXED_SIZE_MISMATCH", path+"/size",
				"the size of fixed '%s' is %d in the %s schema but %d in the %s schema",
				rs.FullName(), rs.Size(), c.who.reader, ws.Size(), c.who.writer)
		}
	case *avro.ArraySchema:
		c.check(rs.Items(), w.(*avro.ArraySchema).Items(), path+"/items", depth+1)
	case *avro.MapSchema:
		c.check(rs.Values(), w.(*avro.MapSchema).Values(), path+"/values", depth+1)
	}
}

// checkAgainstUnion resolves a writer type against the first reader branch
// that matches it, as the spec prescribes.
func (c *avroChecker) checkAgainstUnion(ru *avro.UnionSchema, w avro.Schema, path string, depth int) {
	for _, rb := range ru.Types() {
		if deref(rb).Type() == deref(w).Type() && matches(rb, w) {
			c.check(rb, w, path, depth+1)
			return
		}
	}
	for _, rb := range ru.Types() {
		if matches(rb, w) {
			c.check(rb, w, path, depth+1)
			return
		}
	}
}

// findField finds the writer field a reader field reads: same name, or a
// writer field named by one of the reader field's aliases.
func findField(ws *avro.RecordSchema, rf *avro.Field) *avro.Field {
	for _, wf := range ws.Fields() {
		if wf.Name() == rf.Name() {
			return wf
		}
	}
	for _, wf := range ws.Fields() {
		if slices.Contains(rf.Aliases(), wf.Name()) {
			return wf
		}
	}
	return nil
}
