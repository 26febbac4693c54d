package compat

import (
	"fmt"
	"math/big"
	"strings"
)

// The JSON Schema comparison, after Confluent's SchemaDiff: compare(original,
// update) walks the two models and reports each difference by Confluent's
// Difference.Type name; a difference is compatible when its type is in
// Confluent's set of compatible changes (jsonCompatible). The backward check
// compares old to new, the forward check new to old. Where Sluice departs
// from Confluent it says so at the spot and in docs/schemas.md.

var jsonCompatible = map[string]bool{
	"ID_CHANGED": true, "DESCRIPTION_CHANGED": true, "TITLE_CHANGED": true, "DEFAULT_CHANGED": true,
	"SCHEMA_REMOVED": true, "TYPE_EXTENDED": true,
	"MAX_LENGTH_INCREASED": true, "MAX_LENGTH_REMOVED": true, "MIN_LENGTH_DECREASED": true, "MIN_LENGTH_REMOVED": true,
	"PATTERN_REMOVED":   true,
	"MAXIMUM_INCREASED": true, "MAXIMUM_REMOVED": true, "MINIMUM_DECREASED": true, "MINIMUM_REMOVED": true,
	"EXCLUSIVE_MAXIMUM_INCREASED": true, "EXCLUSIVE_MAXIMUM_REMOVED": true,
	"EXCLUSIVE_MINIMUM_DECREASED": true, "EXCLUSIVE_MINIMUM_REMOVED": true,
	"MULTIPLE_OF_REDUCED": true, "MULTIPLE_OF_REMOVED": true,
	"REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED": true, "REQUIRED_ATTRIBUTE_REMOVED": true,
	"DEPENDENCY_ARRAY_NARROWED": true, "DEPENDENCY_ARRAY_REMOVED": true, "DEPENDENCY_SCHEMA_REMOVED": true,
	"MAX_PROPERTIES_INCREASED": true, "MAX_PROPERTIES_REMOVED": true, "MIN_PROPERTIES_DECREASED": true, "MIN_PROPERTIES_REMOVED": true,
	"ADDITIONAL_PROPERTIES_ADDED": true, "ADDITIONAL_PROPERTIES_EXTENDED": true,
	"PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":       true,
	"REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL": true,
	"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":              true,
	"PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":        true,
	"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL":                     true,
	"PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":    true,
	"PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":  true,
	"MAX_ITEMS_INCREASED": true, "MAX_ITEMS_REMOVED": true, "MIN_ITEMS_DECREASED": true, "MIN_ITEMS_REMOVED": true,
	"MAX_CONTAINS_INCREASED": true, "MAX_CONTAINS_REMOVED": true, "MIN_CONTAINS_DECREASED": true, "MIN_CONTAINS_REMOVED": true,
	"UNIQUE_ITEMS_REMOVED": true, "ADDITIONAL_ITEMS_ADDED": true, "ADDITIONAL_ITEMS_EXTENDED": true,
	"ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":      true,
	"ITEM_ADDED_TO_CLOSED_CONTENT_MODEL":                      true,
	"ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":       true,
	"ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL":                    true,
	"ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":   true,
	"ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": true,
	// unevaluated*: loosened like additional*.
	"UNEVALUATED_PROPERTIES_ADDED": true, "UNEVALUATED_PROPERTIES_EXTENDED": true,
	"UNEVALUATED_ITEMS_ADDED": true, "UNEVALUATED_ITEMS_EXTENDED": true,
	"ENUM_ARRAY_EXTENDED":    true,
	"COMBINED_TYPE_EXTENDED": true, "PRODUCT_TYPE_NARROWED": true, "SUM_TYPE_EXTENDED": true, "NOT_TYPE_NARROWED": true,
}

// jctx is one directional comparison (Confluent's Context): the path walked
// so far and what was found, with memo and cycle guard shared by every
// sub-comparison.
type jctx struct {
	s     side
	path  string // "" is the root, else "/properties/a/..."
	out   []finding
	share *jshared
}

type jshared struct {
	memo  map[[2]*jnode][]finding // paths relative to the pair
	busy  map[[2]*jnode]bool
	steps int
	over  bool
}

func jsonCompare(original, update Schema, s side) []finding {
	o, u := original.(*jsonSchema), update.(*jsonSchema)
	c := &jctx{s: s, share: &jshared{memo: map[[2]*jnode][]finding{}, busy: map[[2]*jnode]bool{}}}
	c.compare(o.model, u.model)
	out := c.out
	if c.share.over {
		out = append(out, finding{path: "#/", rule: "DIFF_LIMIT_EXCEEDED",
			message: fmt.Sprintf("the comparison stopped after %d schema pairs: the schemas are too large or too tangled to compare", compareStepsMax)})
	}
	for i := range out {
		out[i].path = jsonPathString(out[i].path)
	}
	return out
}

// jsonPathString renders an internal path as Confluent does: "#/" and the
// steps.
func jsonPathString(p string) string {
	if strings.HasPrefix(p, "#") {
		return p
	}
	return "#/" + strings.TrimPrefix(p, "/")
}

func (c *jctx) sub() *jctx { return &jctx{s: c.s, path: c.path, share: c.share} }

func (c *jctx) at(step string) *jctx { return &jctx{s: c.s, path: c.path + "/" + step, share: c.share} }

func (c *jctx) compatible() bool {
	for _, f := range c.out {
		if !f.ok {
			return false
		}
	}
	return true
}

func (c *jctx) add(rule string) { c.addAt("", rule) }

func (c *jctx) addAt(attr, rule string) {
	p := c.path
	if attr != "" {
		p += "/" + attr
	}
	c.out = append(c.out, finding{path: p, rule: rule, ok: jsonCompatible[rule], message: jsonMessage(rule, jsonPathString(p), c.s)})
}

// merge takes a child context's findings.
func (c *jctx) merge(o *jctx) { c.out = append(c.out, o.out...) }

func (c *jctx) compare(o, u *jnode) {
	switch {
	case o == nil && u == nil:
		return
	case o == nil:
		c.add("SCHEMA_ADDED")
		return
	case u == nil:
		c.add("SCHEMA_REMOVED")
		return
	}
	c.share.steps++
	if c.share.steps > compareStepsMax {
		c.share.over = true
		return
	}
	o, u = jderef(o), jderef(u)
	if o.kind != jkCombined && u.kind == jkCombined {
		// A schema that became a union: fine if one branch reads it.
		if len(u.subs) == 1 {
			if s := c.try(o, u.subs[0]); s != nil {
				c.merge(s)
				return
			}
		} else if u.criterion == "anyOf" || u.criterion == "oneOf" {
			for _, b := range u.subs {
				if s := c.try(o, b); s != nil {
					c.merge(s)
					c.add("SUM_TYPE_EXTENDED")
					return
				}
			}
		}
	} else if o.kind == jkCombined && u.kind != jkCombined {
		if len(o.subs) == 1 {
			if s := c.try(o.subs[0], u); s != nil {
				c.merge(s)
				return
			}
		} else if o.criterion == "allOf" {
			for _, b := range o.subs {
				if s := c.try(b, u); s != nil {
					c.merge(s)
					c.add("PRODUCT_TYPE_NARROWED")
					return
				}
			}
		}
	}
	if o.kind != u.kind {
		// Anything may become {} (or true); false may become anything.
		if o.kind != jkFalse && u.kind != jkEmpty {
			c.add("TYPE_CHANGED")
		}
		return
	}
	key := [2]*jnode{o, u}
	if c.share.busy[key] {
		return // a recursive pair: compatible unless shown otherwise
	}
	rel, ok := c.share.memo[key]
	if !ok {
		c.share.busy[key] = true
		r := &jctx{s: c.s, share: c.share}
		r.same(o, u)
		delete(c.share.busy, key)
		rel = r.out
		c.share.memo[key] = rel
	}
	for _, f := range rel {
		f.path = c.path + f.path
		f.message = jsonMessage(f.rule, jsonPathString(f.path), c.s)
		c.out = append(c.out, f)
	}
}

// try compares o and u in a scratch context and returns it if compatible.
func (c *jctx) try(o, u *jnode) *jctx {
	s := c.sub()
	s.compare(o, u)
	if s.compatible() {
		return s
	}
	return nil
}

func strPtrEq(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// same compares two nodes of one kind.
func (c *jctx) same(o, u *jnode) {
	if !strPtrEq(o.id, u.id) {
		c.add("ID_CHANGED")
	}
	if !strPtrEq(o.title, u.title) {
		c.add("TITLE_CHANGED")
	}
	if !strPtrEq(o.description, u.description) {
		c.add("DESCRIPTION_CHANGED")
	}
	if o.hasDef != u.hasDef || (o.hasDef && canonicalJSON(o.def) != canonicalJSON(u.def)) {
		c.add("DEFAULT_CHANGED")
	}
	switch o.kind {
	case jkString:
		c.limits("maxLength", "MAX_LENGTH", o.maxLength, u.maxLength)
		c.limits("minLength", "MIN_LENGTH", o.minLength, u.minLength)
		switch {
		case o.pattern == nil && u.pattern != nil:
			c.addAt("pattern", "PATTERN_ADDED")
		case o.pattern != nil && u.pattern == nil:
			c.addAt("pattern", "PATTERN_REMOVED")
		case o.pattern != nil && *o.pattern != *u.pattern:
			c.addAt("pattern", "PATTERN_CHANGED")
		}
	case jkNumber:
		c.number(o, u)
	case jkEnum:
		c.values("enum", o.values, u.values)
	case jkConst:
		if canonicalJSON(o.constVal) != canonicalJSON(u.constVal) {
			c.addAt("const", "ENUM_ARRAY_CHANGED")
		}
	case jkCombined:
		c.combined(o, u)
	case jkNot:
		// A not that excludes less accepts more: compare the excluded
		// schemas the other way round.
		n := c.at("not")
		s := n.sub()
		s.compare(u.not, o.not)
		if s.compatible() {
			n.add("NOT_TYPE_NARROWED")
		} else {
			n.add("NOT_TYPE_EXTENDED")
		}
		c.merge(n)
	case jkObject:
		c.object(o, u)
	case jkArray:
		c.array(o, u)
	}
}

// limits reports a numeric keyword added, removed, increased or decreased.
func (c *jctx) limits(attr, rule string, o, u *big.Rat) {
	switch {
	case o == nil && u == nil:
	case o == nil:
		c.addAt(attr, rule+"_ADDED")
	case u == nil:
		c.addAt(attr, rule+"_REMOVED")
	case o.Cmp(u) < 0:
		c.addAt(attr, rule+"_INCREASED")
	case o.Cmp(u) > 0:
		c.addAt(attr, rule+"_DECREASED")
	}
}

func (c *jctx) number(o, u *jnode) {
	c.limits("maximum", "MAXIMUM", o.maximum, u.maximum)
	c.limits("minimum", "MINIMUM", o.minimum, u.minimum)
	// Confluent compares exclusiveMaximum with the new maximum (and fails
	// when it has none); Sluice compares the two exclusiveMaximum values.
	c.limits("exclusiveMaximum", "EXCLUSIVE_MAXIMUM", o.exclMax, u.exclMax)
	c.limits("exclusiveMinimum", "EXCLUSIVE_MINIMUM", o.exclMin, u.exclMin)
	switch {
	case o.multOf == nil && u.multOf == nil:
	case o.multOf == nil:
		c.addAt("multipleOf", "MULTIPLE_OF_ADDED")
	case u.multOf == nil:
		c.addAt("multipleOf", "MULTIPLE_OF_REMOVED")
	case o.multOf.Cmp(u.multOf) == 0:
	case isMultiple(u.multOf, o.multOf):
		c.addAt("multipleOf", "MULTIPLE_OF_EXPANDED")
	case isMultiple(o.multOf, u.multOf):
		c.addAt("multipleOf", "MULTIPLE_OF_REDUCED")
	default:
		c.addAt("multipleOf", "MULTIPLE_OF_CHANGED")
	}
	if o.integer != u.integer {
		if o.integer {
			c.add("TYPE_EXTENDED")
		} else {
			c.add("TYPE_NARROWED")
		}
	}
}

// isMultiple reports whether a is an integer multiple of b (exactly:
// Confluent truncates both to integers, and fails on fractions below 1).
func isMultiple(a, b *big.Rat) bool {
	if b.Sign() == 0 {
		return false
	}
	q := new(big.Rat).Quo(a, b)
	return q.IsInt()
}

func (c *jctx) values(attr string, o, u []any) {
	os, us := valueSet(o), valueSet(u)
	if setEqual(os, us) {
		return
	}
	switch {
	case subset(os, us):
		c.addAt(attr, "ENUM_ARRAY_EXTENDED")
	case subset(us, os):
		c.addAt(attr, "ENUM_ARRAY_NARROWED")
	default:
		c.addAt(attr, "ENUM_ARRAY_CHANGED")
	}
}

func valueSet(vs []any) map[string]bool {
	m := make(map[string]bool, len(vs))
	for _, v := range vs {
		m[canonicalJSON(v)] = true
	}
	return m
}

func subset(a, b map[string]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func setEqual(a, b map[string]bool) bool { return len(a) == len(b) && subset(a, b) }

// uniqueSubs drops repeated subschemas, as Confluent's set of subschemas.
func uniqueSubs(subs []*jnode) []*jnode {
	seen := map[string]bool{}
	var out []*jnode
	for _, s := range subs {
		id := identity(s)
		if !seen[id] {
			seen[id] = true
			out = append(out, s)
		}
	}
	return out
}

func (c *jctx) combined(o, u *jnode) {
	rule := ""
	switch {
	case o.criterion == u.criterion:
	case u.criterion == "anyOf":
		rule = "COMBINED_TYPE_EXTENDED" // allOf or oneOf to anyOf
	case u.criterion == "oneOf" && (len(o.subs) == 1 || o.criterion == "allOf"):
		rule = "COMBINED_TYPE_EXTENDED" // a single branch, or allOf, to oneOf
	case u.criterion == "allOf" && len(o.subs) == 1 && len(u.subs) == 1:
		rule = "COMBINED_TYPE_EXTENDED"
	default:
		rule = "COMBINED_TYPE_CHANGED"
	}
	if rule != "" {
		c.add(rule)
		if rule == "COMBINED_TYPE_CHANGED" {
			return
		}
	}
	os, us := uniqueSubs(o.subs), uniqueSubs(u.subs)
	switch {
	case len(os) < len(us) && u.criterion == "allOf":
		c.add("PRODUCT_TYPE_EXTENDED")
	case len(os) < len(us):
		c.add("SUM_TYPE_EXTENDED")
	case len(os) > len(us) && o.criterion == "allOf":
		// Fewer constraints of an allOf narrow the product (compatible),
		// whatever the new combination.
		c.add("PRODUCT_TYPE_NARROWED")
	case len(os) > len(us):
		c.add("SUM_TYPE_NARROWED")
	}
	// Every compatible (original, update) pair is an edge; the branches
	// match when a maximum matching covers the smaller side.
	adj := make([][]int, len(os))
	edge := map[[2]int][]finding{}
	for i, ob := range os {
		b := c.at(fmt.Sprintf("%s/%d", o.criterion, i))
		for j, ub := range us {
			if s := b.try(ob, ub); s != nil {
				adj[i] = append(adj[i], j)
				edge[[2]int{i, j}] = s.out
			}
		}
	}
	match := maxMatching(adj, len(us))
	matched := 0
	for i, j := range match {
		if j >= 0 {
			matched++
			c.out = append(c.out, edge[[2]int{i, j}]...)
		}
	}
	if matched < min(len(os), len(us)) {
		c.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")
	}
}

// maxMatching returns, for each left vertex, its right partner or -1, in
// a maximum matching of the bipartite graph adj (augmenting paths).
func maxMatching(adj [][]int, right int) []int {
	matchL := make([]int, len(adj))
	matchR := make([]int, right)
	for i := range matchL {
		matchL[i] = -1
	}
	for j := range matchR {
		matchR[j] = -1
	}
	var try func(i int, seen []bool) bool
	try = func(i int, seen []bool) bool {
		for _, j := range adj[i] {
			if seen[j] {
				continue
			}
			seen[j] = true
			if matchR[j] < 0 || try(matchR[j], seen) {
				matchL[i], matchR[j] = j, i
				return true
			}
		}
		return false
	}
	for i := range adj {
		try(i, make([]bool, right))
	}
	return matchL
}

// jsonMessage describes a difference in words, naming the two schemas as
// s does.
func jsonMessage(rule, path string, s side) string {
	switch rule {
	case "TYPE_CHANGED":
		return fmt.Sprintf("the type at '%s' is different in the %s schema: it does not read what the %s schema allows", path, s.upd, s.orig)
	case "TYPE_EXTENDED":
		return fmt.Sprintf("the type at '%s' is wider in the %s schema (integer to number)", path, s.upd)
	case "TYPE_NARROWED":
		return fmt.Sprintf("the type at '%s' is narrower in the %s schema (number to integer)", path, s.upd)
	case "SCHEMA_ADDED":
		return fmt.Sprintf("the %s schema adds a schema at '%s' where the %s schema has none", s.upd, path, s.orig)
	case "SCHEMA_REMOVED":
		return fmt.Sprintf("the %s schema drops the schema at '%s'", s.upd, path)
	case "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema has an open content model and the %s schema constrains its property at '%s', which may hold any value", s.orig, s.upd, path)
	case "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema adds the property at '%s' with a schema that accepts anything", s.upd, path)
	case "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the property at '%s' is gone from the %s schema, whose open content model still accepts it", path, s.upd)
	case "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema has a closed content model and is missing the property at '%s' of the %s schema", s.upd, path, s.orig)
	case "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":
		return fmt.Sprintf("the property at '%s', which the %s schema forbade (false), is gone from the %s schema's closed content model", path, s.orig, s.upd)
	case "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the property at '%s' is gone from the %s schema and its partially open content model accepts it", path, s.upd)
	case "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the property at '%s' is missing in the %s schema and is not covered by its partially open content model", path, s.upd)
	case "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema adds the property at '%s', within what the %s schema's partially open content model allowed", s.upd, path, s.orig)
	case "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema has the property at '%s', which is missing in the %s schema and not covered by its partially open content model", s.upd, path, s.orig)
	case "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema requires the property at '%s', which the %s schema's closed content model never carried", s.upd, path, s.orig)
	case "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema requires the property at '%s', with a default", s.upd, path)
	case "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
		return fmt.Sprintf("the %s schema adds the optional property at '%s' to a closed content model", s.upd, path)
	case "REQUIRED_ATTRIBUTE_ADDED":
		return fmt.Sprintf("the property at '%s' is required in the %s schema but not in the %s schema", path, s.upd, s.orig)
	case "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED":
		return fmt.Sprintf("the property at '%s' is required in the %s schema, with a default", path, s.upd)
	case "REQUIRED_ATTRIBUTE_REMOVED":
		return fmt.Sprintf("the property at '%s' is no longer required in the %s schema", path, s.upd)
	case "COMBINED_TYPE_CHANGED":
		return fmt.Sprintf("the combination at '%s' changed kind (allOf/anyOf/oneOf) in the %s schema in a way that reads less", path, s.upd)
	case "COMBINED_TYPE_EXTENDED":
		return fmt.Sprintf("the combination at '%s' is looser in the %s schema (to anyOf, or from a single branch)", path, s.upd)
	case "COMBINED_TYPE_SUBSCHEMAS_CHANGED":
		return fmt.Sprintf("the branches at '%s' in the %s schema do not each read a branch of the %s schema", path, s.upd, s.orig)
	case "SUM_TYPE_EXTENDED":
		return fmt.Sprintf("the %s schema adds branches to the anyOf/oneOf at '%s'", s.upd, path)
	case "SUM_TYPE_NARROWED":
		return fmt.Sprintf("the %s schema has fewer anyOf/oneOf branches at '%s' than the %s schema", s.upd, path, s.orig)
	case "PRODUCT_TYPE_EXTENDED":
		return fmt.Sprintf("the %s schema adds allOf branches (constraints) at '%s'", s.upd, path)
	case "PRODUCT_TYPE_NARROWED":
		return fmt.Sprintf("the %s schema has fewer allOf branches (constraints) at '%s'", s.upd, path)
	case "NOT_TYPE_EXTENDED":
		return fmt.Sprintf("the 'not' at '%s' excludes more in the %s schema", path, s.upd)
	case "NOT_TYPE_NARROWED":
		return fmt.Sprintf("the 'not' at '%s' excludes no more in the %s schema", path, s.upd)
	case "DIFF_LIMIT_EXCEEDED":
		return "the comparison stopped at its work limit"
	}
	for _, suffix := range []string{"_ADDED", "_REMOVED", "_INCREASED", "_DECREASED", "_EXTENDED", "_NARROWED", "_CHANGED", "_EXPANDED", "_REDUCED"} {
		if strings.HasSuffix(rule, suffix) {
			what := strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(rule, suffix), "_", " "))
			verb := strings.ToLower(strings.TrimPrefix(suffix, "_"))
			return fmt.Sprintf("%s at '%s' %s in the %s schema", what, path, verb, s.upd)
		}
	}
	return fmt.Sprintf("%s at '%s'", strings.ToLower(strings.ReplaceAll(rule, "_", " ")), path)
}
