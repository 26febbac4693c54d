package compat

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema rules. The reader can read the writer when every document
// valid under the writer is valid under the reader; the checker walks both
// schemas side by side and reports the constraints the reader adds:
//   - TYPE_CHANGED / TYPE_NARROWED: the reader's "type" set does not cover
//     the writer's (integer counts as a number);
//   - REQUIRED_ATTRIBUTE_ADDED: the reader requires a property the writer
//     does not;
//   - PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL: the reader constrains a property
//     the writer left to its open content model (anything may be there);
//   - PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL: the reader forbids extra
//     properties and the writer's property is gone;
//   - PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL: the
//     removed property's writer schema is not accepted by the reader's
//     additionalProperties schema;
//   - ADDITIONAL_PROPERTIES_REMOVED / ADDITIONAL_PROPERTIES_NARROWED: the
//     reader closes or narrows the content model;
//   - ENUM_ARRAY_NARROWED / ENUM_ARRAY_ADDED: the reader's enum misses
//     values the writer allows;
//   - MAX_*_ADDED / MAX_*_DECREASED, MIN_*_ADDED / MIN_*_INCREASED for
//     maximum, maxLength, maxItems, maxProperties and their minimums;
//   - SUM_TYPE_NARROWED: a writer anyOf/oneOf branch no reader branch reads;
//     COMBINED_TYPE_CHANGED: the reader adds anyOf/oneOf that does not
//     read the writer; PRODUCT_TYPE_EXTENDED: the reader adds an allOf
//     constraint.
// Properties the reader adds to a writer with a closed content model are
// compatible, as in Confluent.

type jsonSchema struct {
	root      any
	docs      map[string]any // reference name -> document
	canonical string
}

func (*jsonSchema) Type() Type          { return JSON }
func (s *jsonSchema) Canonical() string { return s.canonical }

const jsonBase = "mem://sluice/"

func jsonURL(name string) string {
	if strings.Contains(name, "://") {
		return name
	}
	return jsonBase + name
}

func parseJSONSchema(text string, deps []Dependency) (Schema, error) {
	c := jsonschema.NewCompiler()
	// Refuse to fetch anything: references must come from the registry.
	c.UseLoader(jsonschema.SchemeURLLoader{})
	docs := map[string]any{}
	for _, d := range deps {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(d.Schema))
		if err != nil {
			return nil, invalid("reference %q: %v", d.Name, err)
		}
		if err := c.AddResource(jsonURL(d.Name), doc); err != nil {
			return nil, invalid("reference %q: %v", d.Name, err)
		}
		docs[d.Name] = doc
	}
	root, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, invalid("%v", err)
	}
	const mainURL = jsonBase + "sluice-registry-input.json"
	if err := c.AddResource(mainURL, root); err != nil {
		return nil, invalid("%v", err)
	}
	if _, err := c.Compile(mainURL); err != nil {
		return nil, invalid("%v", err)
	}
	switch root.(type) {
	case map[string]any, bool:
	default:
		return nil, invalid("a JSON schema must be an object or a boolean")
	}
	canon, err := compactJSON(text)
	if err != nil {
		return nil, invalid("%v", err)
	}
	return &jsonSchema{root: root, docs: docs, canonical: canon}, nil
}

type jsonChecker struct {
	who          roles
	issues       []Issue
	rDocs, wDocs map[string]any
	seen         map[[2]string]bool
}

func jsonCanRead(r, w *jsonSchema, who roles) []Issue {
	c := &jsonChecker{who: who, rDocs: r.docs, wDocs: w.docs, seen: map[[2]string]bool{}}
	c.check(r.root, w.root, r.root, w.root, "#", 0)
	return c.issues
}

func (c *jsonChecker) add(rule, path, format string, args ...any) {
	c.issues = append(c.issues, Issue{Rule: rule, Path: path, Description: fmt.Sprintf(format, args...)})
}

// resolve follows $ref chains (local pointers and references by name);
// it returns the schema and the document it lives in.
func resolveRef(s, doc any, docs map[string]any) (any, any, string) {
	for range nestingDepthMax {
		m, ok := s.(map[string]any)
		if !ok {
			return s, doc, ""
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return s, doc, ""
		}
		file, frag, _ := strings.Cut(ref, "#")
		target := doc
		if file != "" {
			d, ok := docs[file]
			if !ok {
				return nil, doc, ref
			}
			target = d
		}
		v, ok := pointer(target, frag)
		if !ok {
			return nil, doc, ref
		}
		s, doc = v, target
	}
	return nil, doc, "(reference chain too long)"
}

func pointer(doc any, frag string) (any, bool) {
	if frag == "" || frag == "/" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

var allTypes = []string{"array", "boolean", "integer", "null", "number", "object", "string"}

// typeSet returns the types a schema allows: its "type", else the union of
// its anyOf/oneOf branches' types, else all.
func typeSet(m map[string]any) []string {
	switch t := m["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		branches, ok := m[kw].([]any)
		if !ok {
			continue
		}
		var out []string
		for _, b := range branches {
			bm, ok := b.(map[string]any)
			if !ok || bm["$ref"] != nil {
				return allTypes
			}
			for _, t := range typeSet(bm) {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	return allTypes
}

func typeCovered(readerTypes []string, t string) bool {
	return slices.Contains(readerTypes, t) || (t == "integer" && slices.Contains(readerTypes, "number"))
}

func (c *jsonChecker) check(r, w, rDoc, wDoc any, path string, depth int) {
	if depth > nestingDepthMax {
		c.add("TYPE_CHANGED", path, "schema nesting deeper than %d levels", nestingDepthMax)
		return
	}
	r, rDoc, rBad := resolveRef(r, rDoc, c.rDocs)
	w, wDoc, wBad := resolveRef(w, wDoc, c.wDocs)
	if rBad != "" || wBad != "" {
		c.add("REFERENCE_UNRESOLVED", path, "cannot resolve $ref '%s%s'", rBad, wBad)
		return
	}
	// Boolean schemas: true accepts everything, false nothing.
	if rb, ok := r.(bool); ok {
		if !rb {
			if wb, ok := w.(bool); !ok || wb {
				c.add("TYPE_NARROWED", path, "the %s schema at '%s' accepts nothing but the %s schema accepts values", c.who.reader, path, c.who.writer)
			}
		}
		return
	}
	rm, _ := r.(map[string]any)
	var wm map[string]any
	switch wv := w.(type) {
	case bool:
		if !wv {
			return
		}
		wm = map[string]any{}
	case map[string]any:
		wm = wv
	}
	if rm == nil || wm == nil {
		return
	}
	key := [2]string{fmt.Sprintf("%p", rm), fmt.Sprintf("%p", wm)}
	if c.seen[key] {
		return
	}
	c.seen[key] = true

	rTypes, wTypes := typeSet(rm), typeSet(wm)
	var lost []string
	for _, t := range wTypes {
		if !typeCovered(rTypes, t) {
			lost = append(lost, t)
		}
	}
	if len(lost) > 0 {
		rule := "TYPE_CHANGED"
		if len(lost) < len(wTypes) {
			rule = "TYPE_NARROWED"
		}
		c.add(rule, path+"/type", "the %s schema at '%s' allows types %v but the %s schema does not accept %v",
			c.who.writer, path, wTypes, c.who.reader, lost)
	}

	c.checkEnum(rm, wm, path)
	c.checkBounds(rm, wm, path)

	if slices.Contains(wTypes, "object") {
		c.checkObject(rm, wm, rDoc, wDoc, path, depth)
	}
	c.checkCombined(rm, wm, rDoc, wDoc, path, depth)
	if slices.Contains(wTypes, "array") {
		ri, rok := rm["items"]
		wi, wok := wm["items"]
		switch {
		case rok && wok:
			c.check(ri, wi, rDoc, wDoc, path+"/items", depth+1)
		case rok && !wok:
			c.check(ri, true, rDoc, wDoc, path+"/items", depth+1)
		}
	}
}

// reads reports whether r reads w without issues, in a scratch checker.
func (c *jsonChecker) reads(r, w, rDoc, wDoc any, path string, depth int) bool {
	sub := &jsonChecker{who: c.who, rDocs: c.rDocs, wDocs: c.wDocs, seen: map[[2]string]bool{}}
	sub.check(r, w, rDoc, wDoc, path, depth+1)
	return len(sub.issues) == 0
}

// checkCombined handles anyOf/oneOf (sum types: every writer branch must
// be read by some reader branch) and allOf (product types: every reader
// branch must read some writer branch). A combinator only the writer has
// loosens nothing for the reader; one only the reader has must accept the
// writer's whole schema.
func (c *jsonChecker) checkCombined(rm, wm map[string]any, rDoc, wDoc any, path string, depth int) {
	plainW := map[string]any{}
	for k, v := range wm {
		if k != "anyOf" && k != "oneOf" && k != "allOf" {
			plainW[k] = v
		}
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		rb, rok := rm[kw].([]any)
		if !rok {
			continue
		}
		wb, wok := wm[kw].([]any)
		if !wok {
			if !slices.ContainsFunc(rb, func(r any) bool { return c.reads(r, plainW, rDoc, wDoc, path, depth) }) {
				c.add("COMBINED_TYPE_CHANGED", path+"/"+kw, "the %s schema adds %s at '%s' and none of its branches reads the %s schema", c.who.reader, kw, path, c.who.writer)
			}
			continue
		}
		for i, w := range wb {
			if !slices.ContainsFunc(rb, func(r any) bool { return c.reads(r, w, rDoc, wDoc, path, depth) }) {
				c.add("SUM_TYPE_NARROWED", fmt.Sprintf("%s/%s/%d", path, kw, i), "branch %d of %s at '%s' in the %s schema is read by no branch of the %s schema", i, kw, path, c.who.writer, c.who.reader)
			}
		}
	}
	rb, rok := rm["allOf"].([]any)
	if !rok {
		return
	}
	wb, _ := wm["allOf"].([]any)
	for i, r := range rb {
		if !c.reads(r, plainW, rDoc, wDoc, path, depth) &&
			!slices.ContainsFunc(wb, func(w any) bool { return c.reads(r, w, rDoc, wDoc, path, depth) }) {
			c.add("PRODUCT_TYPE_EXTENDED", fmt.Sprintf("%s/allOf/%d", path, i), "branch %d of allOf at '%s' in the %s schema adds a constraint the %s schema does not have", i, path, c.who.reader, c.who.writer)
		}
	}
}

func (c *jsonChecker) checkEnum(rm, wm map[string]any, path string) {
	re, rok := rm["enum"].([]any)
	if !rok {
		return
	}
	we, wok := wm["enum"].([]any)
	if !wok {
		c.add("ENUM_ARRAY_ADDED", path+"/enum", "the %s schema restricts '%s' to an enum the %s schema does not have", c.who.reader, path, c.who.writer)
		return
	}
	var missing []string
	for _, v := range we {
		if !slices.ContainsFunc(re, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
			missing = append(missing, fmt.Sprint(v))
		}
	}
	if len(missing) > 0 {
		c.add("ENUM_ARRAY_NARROWED", path+"/enum", "the %s schema's enum at '%s' lacks %v allowed by the %s schema", c.who.reader, path, missing, c.who.writer)
	}
}

func num(v any) (float64, bool) {
	f, ok := v.(float64)
	if !ok {
		// jsonschema.UnmarshalJSON yields json.Number.
		if n, ok2 := v.(interface{ Float64() (float64, error) }); ok2 {
			x, err := n.Float64()
			return x, err == nil
		}
	}
	return f, ok
}

func (c *jsonChecker) checkBounds(rm, wm map[string]any, path string) {
	for _, k := range []string{"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"} {
		rv, rok := num(rm[k])
		if !rok {
			continue
		}
		wv, wok := num(wm[k])
		switch {
		case !wok:
			c.add(strings.ToUpper(camelToSnake(k))+"_ADDED", path+"/"+k, "the %s schema adds %s %v at '%s'", c.who.reader, k, rv, path)
		case rv < wv:
			c.add(strings.ToUpper(camelToSnake(k))+"_DECREASED", path+"/"+k, "%s at '%s' is %v in the %s schema, below %v in the %s schema", k, path, rv, c.who.reader, wv, c.who.writer)
		}
	}
	for _, k := range []string{"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"} {
		rv, rok := num(rm[k])
		if !rok {
			continue
		}
		wv, wok := num(wm[k])
		if !wok {
			wv = math.Inf(-1)
		}
		if rv > wv {
			rule := strings.ToUpper(camelToSnake(k)) + "_INCREASED"
			if !wok {
				rule = strings.ToUpper(camelToSnake(k)) + "_ADDED"
			}
			c.add(rule, path+"/"+k, "%s at '%s' is %v in the %s schema, above the %s schema's", k, path, rv, c.who.reader, c.who.writer)
		}
	}
}

func camelToSnake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func stringSet(v any) map[string]bool {
	out := map[string]bool{}
	if list, ok := v.([]any); ok {
		for _, x := range list {
			if s, ok := x.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

// contentModel returns the additionalProperties schema: true when absent.
func contentModel(m map[string]any) any {
	if v, ok := m["additionalProperties"]; ok {
		return v
	}
	return true
}

func isTrue(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	if m, ok := v.(map[string]any); ok {
		return len(m) == 0
	}
	return false
}

func isFalse(v any) bool {
	b, ok := v.(bool)
	return ok && !b
}

func (c *jsonChecker) checkObject(rm, wm map[string]any, rDoc, wDoc any, path string, depth int) {
	rReq, wReq := stringSet(rm["required"]), stringSet(wm["required"])
	var added []string
	for p := range rReq {
		if !wReq[p] {
			added = append(added, p)
		}
	}
	sort.Strings(added)
	for _, p := range added {
		c.add("REQUIRED_ATTRIBUTE_ADDED", path+"/properties/"+p,
			"property '%s' at '%s' is required in the %s schema but not in the %s schema", p, path, c.who.reader, c.who.writer)
	}

	rProps, _ := rm["properties"].(map[string]any)
	wProps, _ := wm["properties"].(map[string]any)
	rAdd, wAdd := contentModel(rm), contentModel(wm)

	for _, p := range sortedKeys(wProps) {
		ppath := path + "/properties/" + p
		if rp, ok := rProps[p]; ok {
			c.check(rp, wProps[p], rDoc, wDoc, ppath, depth+1)
			continue
		}
		switch {
		case isTrue(rAdd):
			// Open reader: the removed property lands in the content model.
		case isFalse(rAdd):
			c.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", ppath,
				"property '%s' of the %s schema is missing in the %s schema, whose content model is closed", p, c.who.writer, c.who.reader)
		default:
			sub := &jsonChecker{who: c.who, rDocs: c.rDocs, wDocs: c.wDocs, seen: c.seen}
			sub.check(rAdd, wProps[p], rDoc, wDoc, ppath, depth+1)
			if len(sub.issues) > 0 {
				c.add("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", ppath,
					"property '%s' of the %s schema is missing in the %s schema and its additionalProperties does not accept it", p, c.who.writer, c.who.reader)
			}
		}
	}
	for _, p := range sortedKeys(rProps) {
		if _, ok := wProps[p]; ok {
			continue
		}
		ppath := path + "/properties/" + p
		switch {
		case isFalse(wAdd):
			// Closed writer: its documents never carry the property.
		case isTrue(wAdd):
			if !isTrue(rProps[p]) {
				c.add("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", ppath,
					"property '%s' is added by the %s schema, but the %s schema's open content model lets it hold any value", p, c.who.reader, c.who.writer)
			}
		default:
			c.check(rProps[p], wAdd, rDoc, wDoc, ppath, depth+1)
		}
	}
	switch {
	case isTrue(rAdd):
	case isFalse(rAdd):
		if !isFalse(wAdd) {
			c.add("ADDITIONAL_PROPERTIES_REMOVED", path+"/additionalProperties",
				"the %s schema forbids additional properties at '%s' that the %s schema allows", c.who.reader, path, c.who.writer)
		}
	default:
		if isTrue(wAdd) {
			c.add("ADDITIONAL_PROPERTIES_NARROWED", path+"/additionalProperties",
				"the %s schema narrows additional properties at '%s' that the %s schema leaves open", c.who.reader, path, c.who.writer)
		} else if !isFalse(wAdd) {
			c.check(rAdd, wAdd, rDoc, wDoc, path+"/additionalProperties", depth+1)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
