package compat

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// JSON Schema is checked as Confluent Schema Registry checks it: the
// schema is first read into the model Confluent's library (everit) builds,
// one node per keyword family (string, number, object, array, enum, const,
// combined, not, conditional; several families in one schema object become
// a synthetic allOf, a "type" list an anyOf), then the old and the new
// models are compared node by node (jsondiff.go). A schema without
// "$schema" is read as draft-07, Confluent's default.

type jsonSchema struct {
	root      any
	docs      map[string]any // reference name -> document
	canonical string
	model     *jnode
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
	// Confluent reads a schema without $schema as draft-07.
	c.DefaultDraft(jsonschema.Draft7)
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
	switch root.(type) {
	case map[string]any, bool:
	default:
		return nil, invalid("a JSON schema must be an object or a boolean")
	}
	const mainURL = jsonBase + "sluice-registry-input.json"
	if err := c.AddResource(mainURL, root); err != nil {
		return nil, invalid("%v", err)
	}
	if _, err := c.Compile(mainURL); err != nil {
		return nil, invalid("%v", err)
	}
	canon, err := compactJSON(text)
	if err != nil {
		return nil, invalid("%v", err)
	}
	l := newJSONLoader(root, docs)
	model := l.load(root, l.rootDoc, 0)
	if l.err != nil {
		return nil, invalid("%v", l.err)
	}
	return &jsonSchema{root: root, docs: docs, canonical: canon, model: model}, nil
}

// jkind is the class of a model node, as everit's Schema subclasses.
type jkind uint8

const (
	jkEmpty jkind = iota // {} or true: anything
	jkFalse
	jkString
	jkNumber
	jkBoolean
	jkNull
	jkObject
	jkArray
	jkEnum
	jkConst
	jkCombined
	jkNot
	jkConditional
	jkRef
)

var jkindNames = [...]string{"empty", "false", "string", "number", "boolean", "null", "object", "array",
	"enum", "const", "combined", "not", "conditional", "$ref"}

func (k jkind) String() string { return jkindNames[k] }

type jpattern struct {
	src    string
	re     *regexp.Regexp // nil when Go cannot compile the ECMA pattern: matches nothing
	schema *jnode
}

// jnode is one schema in the model.
type jnode struct {
	kind jkind
	raw  any // the source, for identity
	doc  *jdoc
	// Common keywords (everit's loadCommonSchemaProperties).
	id, title, description *string
	def                    any
	hasDef                 bool
	deprecated             bool

	// string
	minLength, maxLength *big.Rat
	pattern              *string
	// number
	integer                                    bool
	minimum, maximum, exclMin, exclMax, multOf *big.Rat
	// object
	props       map[string]*jnode
	propOrder   []string
	required    map[string]bool
	permitsAddl bool
	addl        *jnode
	patterns    []jpattern
	minProps    *big.Rat
	maxProps    *big.Rat
	propDeps    map[string][]string
	schemaDeps  map[string]*jnode
	unevalProps *jnode
	depsKey     string // "dependencies", or "dependentRequired" for 2019-09 and later
	// array
	items            *jnode
	tuple            []*jnode
	permitsAddlItems bool
	addlItems        *jnode
	minItems         *big.Rat
	maxItems         *big.Rat
	minContains      *big.Rat
	maxContains      *big.Rat
	unique           bool
	unevalItems      *jnode
	tupleKey         string // "items" or, in 2020-12, "prefixItems"
	addlItemsKey     string // "additionalItems" or, in 2020-12, "items"
	// enum / const
	values   []any
	constVal any
	// combined
	criterion string // allOf, anyOf, oneOf
	subs      []*jnode
	synthetic bool
	// not
	not *jnode
	// $ref
	ref    string
	target *jnode
}

// jdoc is one document: the schema or a referenced one.
type jdoc struct {
	root  any
	draft int // 4, 6, 7, 2019, 2020
	ids   map[string]any
}

type jsonLoader struct {
	docs    map[string]*jdoc
	rootDoc *jdoc
	memo    map[uintptr]*jnode
	err     error
}

func draftOf(root any) int {
	m, ok := root.(map[string]any)
	if !ok {
		return 7
	}
	s, _ := m["$schema"].(string)
	switch {
	case strings.Contains(s, "draft-04"):
		return 4
	case strings.Contains(s, "draft-06"):
		return 6
	case strings.Contains(s, "2019-09"):
		return 2019
	case strings.Contains(s, "2020-12"):
		return 2020
	}
	return 7
}

func newJSONDoc(root any) *jdoc {
	d := &jdoc{root: root, draft: draftOf(root), ids: map[string]any{}}
	d.collectIDs(root, 0)
	return d
}

// collectIDs indexes subschemas by their $id / id / $anchor, so that a
// $ref may name them.
func (d *jdoc) collectIDs(v any, depth int) {
	if depth > nestingDepthMax {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		for _, k := range []string{"$id", "id", "$anchor"} {
			if s, ok := t[k].(string); ok && s != "" {
				if k == "$anchor" {
					s = "#" + s
				}
				if _, dup := d.ids[s]; !dup {
					d.ids[s] = t
				}
			}
		}
		for k, c := range t {
			if k == "enum" || k == "const" || k == "default" || k == "examples" {
				continue
			}
			d.collectIDs(c, depth+1)
		}
	case []any:
		for _, c := range t {
			d.collectIDs(c, depth+1)
		}
	}
}

func newJSONLoader(root any, deps map[string]any) *jsonLoader {
	l := &jsonLoader{docs: map[string]*jdoc{}, memo: map[uintptr]*jnode{}}
	for name, d := range deps {
		l.docs[name] = newJSONDoc(d)
	}
	l.rootDoc = newJSONDoc(root)
	return l
}

func mapKey(m map[string]any) uintptr { return reflect.ValueOf(m).Pointer() }

// load builds the node of v, a schema in doc. Schema objects are
// memoized, so recursive references close into cycles.
func (l *jsonLoader) load(v any, doc *jdoc, depth int) *jnode {
	if depth > nestingDepthMax {
		if l.err == nil {
			l.err = fmt.Errorf("schema nested deeper than %d levels", nestingDepthMax)
		}
		return &jnode{kind: jkEmpty, doc: doc}
	}
	switch t := v.(type) {
	case bool:
		if t {
			return &jnode{kind: jkEmpty, raw: v, doc: doc}
		}
		return &jnode{kind: jkFalse, raw: v, doc: doc}
	case map[string]any:
		if n := l.memo[mapKey(t)]; n != nil {
			return n
		}
		n := &jnode{doc: doc}
		l.memo[mapKey(t)] = n
		l.loadObject(n, t, doc, depth)
		return n
	}
	return &jnode{kind: jkEmpty, raw: v, doc: doc}
}

func (l *jsonLoader) loadObject(n *jnode, m map[string]any, doc *jdoc, depth int) {
	n.raw = m
	// Everit reads $ref alone up to draft-07: its siblings are ignored.
	if ref, ok := m["$ref"].(string); ok && doc.draft <= 7 {
		n.kind, n.ref = jkRef, ref
		n.target = l.resolve(ref, doc, depth)
		l.common(n, m, doc)
		return
	}
	var parts []*jnode
	consumed := map[string]bool{}
	if ref, ok := m["$ref"].(string); ok {
		parts = append(parts, &jnode{kind: jkRef, ref: ref, raw: m, doc: doc, target: l.resolve(ref, doc, depth)})
	}
	if vals, ok := m["enum"].([]any); ok {
		parts = append(parts, &jnode{kind: jkEnum, values: vals, raw: m, doc: doc})
	}
	var combined []*jnode
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		list, ok := m[kw].([]any)
		if !ok {
			continue
		}
		c := &jnode{kind: jkCombined, criterion: kw, raw: m, doc: doc}
		for _, s := range list {
			c.subs = append(c.subs, l.load(s, doc, depth+1))
		}
		combined = append(combined, c)
	}
	switch len(combined) {
	case 0:
	case 1:
		parts = append(parts, combined[0])
	default:
		parts = append(parts, &jnode{kind: jkCombined, criterion: "allOf", subs: combined, synthetic: true, doc: doc, raw: m})
	}
	if v, ok := m["not"]; ok {
		parts = append(parts, &jnode{kind: jkNot, not: l.load(v, doc, depth+1), raw: m, doc: doc})
	}
	if v, ok := m["const"]; ok && doc.draft >= 6 {
		parts = append(parts, &jnode{kind: jkConst, constVal: v, raw: m, doc: doc})
	}
	switch t := m["type"].(type) {
	case string:
		p := l.typed(t, m, doc, depth, consumed)
		p.raw = m
		parts = append(parts, p)
	case []any:
		c := &jnode{kind: jkCombined, criterion: "anyOf", doc: doc, raw: m}
		for _, x := range t {
			if s, ok := x.(string); ok {
				sub := l.typed(s, m, doc, depth, consumed)
				sub.raw = m
				c.subs = append(c.subs, sub)
			}
		}
		parts = append(parts, c)
	}
	// Keyword families present without a "type" that names them.
	has := func(kws []string) bool {
		for _, k := range kws {
			if _, ok := m[k]; ok && !consumed[k] {
				return true
			}
		}
		return false
	}
	sniffed := func(p *jnode) {
		p.raw, p.doc = m, doc
		parts = append(parts, p)
	}
	if has(arrayKeywords(doc.draft)) {
		sniffed(l.array(m, doc, depth, consumed))
	}
	if has(objectKeywords(doc.draft)) {
		sniffed(l.object(m, doc, depth, consumed))
	}
	if has(numberKeywords) {
		sniffed(l.number(m, consumed))
	}
	if has(stringKeywords) {
		sniffed(l.str(m, consumed))
	}
	if doc.draft >= 7 && has([]string{"if", "then", "else"}) {
		sniffed(&jnode{kind: jkConditional})
	}
	for _, p := range parts {
		if p.doc == nil {
			p.doc = doc
		}
	}
	switch len(parts) {
	case 0:
		n.kind = jkEmpty
	case 1:
		p := parts[0]
		raw := n.raw
		*n = *p
		n.raw = raw
	default:
		n.kind, n.criterion, n.subs, n.synthetic = jkCombined, "allOf", parts, true
	}
	n.doc = doc
	l.common(n, m, doc)
}

var (
	numberKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
	stringKeywords = []string{"minLength", "maxLength", "pattern", "format"}
)

func objectKeywords(draft int) []string {
	kws := []string{"properties", "required", "minProperties", "maxProperties", "dependencies",
		"patternProperties", "additionalProperties", "propertyNames"}
	if draft >= 2019 {
		kws = append(kws, "dependentRequired", "dependentSchemas", "unevaluatedProperties")
	}
	return kws
}

func arrayKeywords(draft int) []string {
	kws := []string{"items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains"}
	if draft >= 2019 {
		kws = append(kws, "minContains", "maxContains", "unevaluatedItems")
	}
	if draft >= 2020 {
		kws = append(kws, "prefixItems")
	}
	return kws
}

func (l *jsonLoader) typed(t string, m map[string]any, doc *jdoc, depth int, consumed map[string]bool) *jnode {
	switch t {
	case "string":
		return l.str(m, consumed)
	case "integer":
		n := l.number(m, consumed)
		n.integer = true
		return n
	case "number":
		return l.number(m, consumed)
	case "boolean":
		return &jnode{kind: jkBoolean, doc: doc}
	case "null":
		return &jnode{kind: jkNull, doc: doc}
	case "object":
		return l.object(m, doc, depth, consumed)
	case "array":
		return l.array(m, doc, depth, consumed)
	}
	return &jnode{kind: jkEmpty, doc: doc}
}

func consume(consumed map[string]bool, kws []string) {
	for _, k := range kws {
		consumed[k] = true
	}
}

func rat(v any) *big.Rat {
	var s string
	switch t := v.(type) {
	case json.Number:
		s = string(t)
	case float64:
		return new(big.Rat).SetFloat64(t)
	default:
		return nil
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil
	}
	return r
}

func (l *jsonLoader) str(m map[string]any, consumed map[string]bool) *jnode {
	consume(consumed, stringKeywords)
	n := &jnode{kind: jkString}
	n.minLength, n.maxLength = rat(m["minLength"]), rat(m["maxLength"])
	if p, ok := m["pattern"].(string); ok {
		n.pattern = &p
	}
	return n
}

func (l *jsonLoader) number(m map[string]any, consumed map[string]bool) *jnode {
	consume(consumed, numberKeywords)
	n := &jnode{kind: jkNumber}
	n.minimum, n.maximum, n.multOf = rat(m["minimum"]), rat(m["maximum"]), rat(m["multipleOf"])
	// Draft 4's boolean exclusiveMaximum/Minimum qualify maximum/minimum;
	// from draft 6 they are limits of their own.
	n.exclMin, n.exclMax = rat(m["exclusiveMinimum"]), rat(m["exclusiveMaximum"])
	return n
}

func (l *jsonLoader) object(m map[string]any, doc *jdoc, depth int, consumed map[string]bool) *jnode {
	consume(consumed, objectKeywords(doc.draft))
	n := &jnode{kind: jkObject, doc: doc, permitsAddl: true, required: map[string]bool{}, depsKey: "dependencies"}
	if props, ok := m["properties"].(map[string]any); ok {
		n.props = make(map[string]*jnode, len(props))
		for k, v := range props {
			n.props[k] = l.load(v, doc, depth+1)
			n.propOrder = append(n.propOrder, k)
		}
		sort.Strings(n.propOrder)
	}
	if pp, ok := m["patternProperties"].(map[string]any); ok {
		keys := make([]string, 0, len(pp))
		for k := range pp {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			re, _ := regexp.Compile(k)
			n.patterns = append(n.patterns, jpattern{src: k, re: re, schema: l.load(pp[k], doc, depth+1)})
		}
	}
	switch a := m["additionalProperties"].(type) {
	case bool:
		n.permitsAddl = a
	case map[string]any:
		n.addl = l.load(a, doc, depth+1)
	}
	for _, r := range stringList(m["required"]) {
		n.required[r] = true
	}
	n.minProps, n.maxProps = rat(m["minProperties"]), rat(m["maxProperties"])
	n.propDeps, n.schemaDeps = map[string][]string{}, map[string]*jnode{}
	if doc.draft >= 2019 {
		n.depsKey = "dependentRequired"
		if dr, ok := m["dependentRequired"].(map[string]any); ok {
			for k, v := range dr {
				n.propDeps[k] = stringList(v)
			}
		}
		if ds, ok := m["dependentSchemas"].(map[string]any); ok {
			for k, v := range ds {
				n.schemaDeps[k] = l.load(v, doc, depth+1)
			}
		}
	} else if deps, ok := m["dependencies"].(map[string]any); ok {
		for k, v := range deps {
			if list, ok := v.([]any); ok {
				n.propDeps[k] = stringList(list)
			} else {
				n.schemaDeps[k] = l.load(v, doc, depth+1)
			}
		}
	}
	if u, ok := m["unevaluatedProperties"]; ok {
		n.unevalProps = l.load(u, doc, depth+1)
	}
	return n
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (l *jsonLoader) array(m map[string]any, doc *jdoc, depth int, consumed map[string]bool) *jnode {
	consume(consumed, arrayKeywords(doc.draft))
	n := &jnode{kind: jkArray, doc: doc, permitsAddlItems: true, tupleKey: "items", addlItemsKey: "additionalItems"}
	loadTuple := func(list []any) {
		n.tuple = make([]*jnode, 0, len(list))
		for _, v := range list {
			n.tuple = append(n.tuple, l.load(v, doc, depth+1))
		}
	}
	loadAddl := func(v any) {
		switch a := v.(type) {
		case bool:
			n.permitsAddlItems = a
		case map[string]any:
			n.addlItems = l.load(a, doc, depth+1)
		}
	}
	if doc.draft >= 2020 {
		n.tupleKey, n.addlItemsKey = "prefixItems", "items"
		if list, ok := m["prefixItems"].([]any); ok {
			loadTuple(list)
			if v, ok := m["items"]; ok {
				loadAddl(v)
			}
		} else if v, ok := m["items"]; ok {
			n.items = l.load(v, doc, depth+1)
		}
	} else {
		switch it := m["items"].(type) {
		case []any:
			loadTuple(it)
		case map[string]any, bool:
			n.items = l.load(it, doc, depth+1)
		}
		if v, ok := m["additionalItems"]; ok {
			loadAddl(v)
		}
	}
	n.minItems, n.maxItems = rat(m["minItems"]), rat(m["maxItems"])
	n.minContains, n.maxContains = rat(m["minContains"]), rat(m["maxContains"])
	n.unique, _ = m["uniqueItems"].(bool)
	if u, ok := m["unevaluatedItems"]; ok {
		n.unevalItems = l.load(u, doc, depth+1)
	}
	return n
}

func (l *jsonLoader) common(n *jnode, m map[string]any, doc *jdoc) {
	idKey := "$id"
	if doc.draft == 4 {
		idKey = "id"
	}
	str := func(k string) *string {
		if s, ok := m[k].(string); ok {
			return &s
		}
		return nil
	}
	n.id, n.title, n.description = str(idKey), str("title"), str("description")
	n.def, n.hasDef = m["default"]
	n.deprecated, _ = m["deprecated"].(bool)
}

// resolve follows a $ref: a JSON pointer, an $id or $anchor in the same
// document, or a reference name (with an optional fragment) of a
// registered dependency.
func (l *jsonLoader) resolve(ref string, doc *jdoc, depth int) *jnode {
	file, frag, hasFrag := strings.Cut(ref, "#")
	target := doc
	if file != "" {
		if v, ok := doc.ids[file]; ok && !hasFrag {
			return l.load(v, doc, depth+1)
		}
		d, ok := l.docs[file]
		if !ok {
			d, ok = l.docs[strings.TrimPrefix(file, jsonBase)]
		}
		if !ok {
			for _, od := range l.docs {
				if v, found := od.ids[file]; found {
					if !hasFrag || frag == "" {
						return l.load(v, od, depth+1)
					}
				}
			}
			return l.unresolved(ref, doc)
		}
		target = d
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		if v, ok := target.ids["#"+frag]; ok {
			return l.load(v, target, depth+1)
		}
		return l.unresolved(ref, doc)
	}
	v, ok := pointer(target.root, frag)
	if !ok {
		return l.unresolved(ref, doc)
	}
	return l.load(v, target, depth+1)
}

// unresolved is a $ref the model cannot follow (the compiler resolved it,
// through base URIs this resolver does not track): compared as {}.
func (l *jsonLoader) unresolved(ref string, doc *jdoc) *jnode {
	return &jnode{kind: jkEmpty, doc: doc, ref: ref}
}

func pointer(doc any, frag string) (any, bool) {
	if frag == "" || frag == "/" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			var i int
			if _, err := fmt.Sscan(tok, &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// jderef follows $ref nodes to the schema they name (everit's
// normalizeSchema); a reference cycle ends in an empty schema.
func jderef(n *jnode) *jnode {
	for i := 0; n != nil && n.kind == jkRef; i++ {
		if i > nestingDepthMax || n.target == nil {
			return &jnode{kind: jkEmpty}
		}
		n = n.target
	}
	return n
}

// identity is what makes two subschemas the same member of a combined
// schema's set (everit compares their serialized forms): the source text
// and the keyword family the node was read for.
func identity(n *jnode) string {
	return fmt.Sprintf("%s/%s/%t/%s", n.kind, n.criterion, n.integer, canonicalJSON(n.raw))
}

// canonicalJSON renders v with sorted keys and normalized numbers: the
// identity of a subschema or value.
func canonicalJSON(v any) string {
	var b strings.Builder
	writeCanonical(&b, v)
	return b.String()
}

func writeCanonical(b *strings.Builder, v any) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			writeCanonical(b, t[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, x)
		}
		b.WriteByte(']')
	case json.Number, float64:
		if r := rat(t); r != nil {
			b.WriteString(r.RatString())
			return
		}
		fmt.Fprint(b, t)
	default:
		x, _ := json.Marshal(t)
		b.Write(x)
	}
}
