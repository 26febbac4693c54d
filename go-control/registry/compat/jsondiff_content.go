package compat

import (
	"fmt"
	"slices"
	"sort"
)

// Objects and arrays: the content-model part of the JSON Schema
// comparison (jsondiff.go), after Confluent's ObjectSchemaDiff and
// ArraySchemaDiff.

func isOpenObject(n *jnode) bool {
	return len(n.patterns) == 0 && n.addl == nil && n.permitsAddl && (n.unevalProps == nil || n.unevalProps.kind == jkEmpty)
}

// partialObject is the schema an object's partially open content model
// gives property key: a matching patternProperties entry, else
// additionalProperties, else unevaluatedProperties; nil when closed.
func partialObject(n *jnode, key string) *jnode {
	for _, p := range n.patterns {
		if p.re != nil && p.re.MatchString(key) {
			return p.schema
		}
	}
	if n.addl != nil {
		return n.addl
	}
	if n.permitsAddl && n.unevalProps != nil && n.unevalProps.kind != jkFalse {
		return n.unevalProps
	}
	return nil
}

func (c *jctx) object(o, u *jnode) {
	c.requiredAttrs(o, u)
	c.properties(o, u)
	c.dependencies(o, u)
	c.additionalProperties(o, u)
	c.unevaluated("unevaluatedProperties", "UNEVALUATED_PROPERTIES", o.unevalProps, u.unevalProps)
	c.limits("maxProperties", "MAX_PROPERTIES", o.maxProps, u.maxProps)
	c.limits("minProperties", "MIN_PROPERTIES", o.minProps, u.minProps)
}

// requiredAttrs compares "required" for the properties both schemas have.
func (c *jctx) requiredAttrs(o, u *jnode) {
	req := c.at("required")
	for _, k := range o.propOrder {
		if _, ok := u.props[k]; !ok {
			continue
		}
		switch {
		case o.required[k] && !u.required[k]:
			req.addAt(k, "REQUIRED_ATTRIBUTE_REMOVED")
		case !o.required[k] && u.required[k]:
			if u.props[k].hasDef {
				req.addAt(k, "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED")
			} else {
				req.addAt(k, "REQUIRED_ATTRIBUTE_ADDED")
			}
		}
	}
	c.merge(req)
}

// properties compares each property either schema has.
func (c *jctx) properties(o, u *jnode) {
	keys := append(slices.Clone(o.propOrder), u.propOrder...)
	sort.Strings(keys)
	keys = slices.Compact(keys)
	for _, k := range keys {
		p := c.at("properties/" + k)
		op, uop := o.props[k], u.props[k]
		switch {
		case uop == nil:
			p.propertyRemoved(k, op, u)
		case op == nil:
			p.propertyAdded(k, o, u, uop)
		default:
			p.compare(op, uop)
		}
		c.merge(p)
	}
}

// propertyRemoved judges property k of the original, gone from update u:
// only u's content model decides whether it may still appear.
func (p *jctx) propertyRemoved(k string, op, u *jnode) {
	if isOpenObject(u) {
		p.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
	} else if partial := partialObject(u, k); partial != nil {
		s := p.sub()
		s.compare(op, partial)
		p.merge(s)
		if s.compatible() {
			p.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		} else {
			p.add("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		}
	} else if op.kind == jkFalse {
		p.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	} else {
		p.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	}
}

// propertyAdded judges property k, new in update u (uop), against the
// original o's content model.
func (p *jctx) propertyAdded(k string, o, u, uop *jnode) {
	if isOpenObject(o) {
		if uop.kind == jkEmpty {
			p.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
		} else {
			p.add("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
		}
	} else {
		if partial := partialObject(o, k); partial != nil {
			s := p.sub()
			s.compare(partial, uop)
			p.merge(s)
			if s.compatible() {
				p.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
			} else {
				p.add("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
			}
		}
		switch {
		case u.required[k] && uop.hasDef:
			p.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL")
		case u.required[k]:
			p.add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
		default:
			p.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
		}
	}
}

// dependencies compares dependencies / dependentRequired (property
// arrays) and dependencies / dependentSchemas (schemas).
func (c *jctx) dependencies(o, u *jnode) {
	dkeys := unionKeys(o.propDeps, u.propDeps)
	for _, k := range dkeys {
		d := c.at(o.depsKey + "/" + k)
		od, okO := o.propDeps[k]
		ud, okU := u.propDeps[k]
		switch {
		case !okU:
			d.add("DEPENDENCY_ARRAY_REMOVED")
		case !okO:
			d.add("DEPENDENCY_ARRAY_ADDED")
		default:
			os, us := stringSet(od), stringSet(ud)
			switch {
			case setEqualS(os, us):
			case subsetS(os, us):
				d.add("DEPENDENCY_ARRAY_EXTENDED")
			case subsetS(us, os):
				d.add("DEPENDENCY_ARRAY_NARROWED")
			default:
				d.add("DEPENDENCY_ARRAY_CHANGED")
			}
		}
		c.merge(d)
	}
	schemaKey := "dependencies"
	if o.depsKey != "dependencies" {
		schemaKey = "dependentSchemas"
	}
	for _, k := range unionKeys(o.schemaDeps, u.schemaDeps) {
		d := c.at(schemaKey + "/" + k)
		os, us := o.schemaDeps[k], u.schemaDeps[k]
		switch {
		case us == nil:
			d.add("DEPENDENCY_SCHEMA_REMOVED")
		case os == nil:
			d.add("DEPENDENCY_SCHEMA_ADDED")
		default:
			d.compare(os, us)
		}
		c.merge(d)
	}
}

func (c *jctx) additionalProperties(o, u *jnode) {
	a := c.at("additionalProperties")
	switch {
	case o.permitsAddl != u.permitsAddl:
		if u.permitsAddl {
			a.add("ADDITIONAL_PROPERTIES_ADDED")
		} else {
			a.add("ADDITIONAL_PROPERTIES_REMOVED")
		}
	case o.addl == nil && u.addl != nil:
		a.add("ADDITIONAL_PROPERTIES_NARROWED")
	case o.addl != nil && u.addl == nil:
		a.add("ADDITIONAL_PROPERTIES_EXTENDED")
	default:
		a.compare(o.addl, u.addl)
	}
	c.merge(a)
}

func unionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func stringSet(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, s := range list {
		m[s] = true
	}
	return m
}

func subsetS(a, b map[string]bool) bool   { return subset(a, b) }
func setEqualS(a, b map[string]bool) bool { return setEqual(a, b) }

// unevaluated compares unevaluatedProperties or unevaluatedItems: absent or
// true accepts anything, false nothing.
func (c *jctx) unevaluated(attr, rule string, o, u *jnode) {
	if o == nil && u == nil {
		return
	}
	x := c.at(attr)
	isFalse := func(n *jnode) bool { return n != nil && n.kind == jkFalse }
	isEmpty := func(n *jnode) bool { return n != nil && n.kind == jkEmpty }
	switch {
	case o == nil && isFalse(u):
		x.add(rule + "_REMOVED")
	case o == nil:
		x.add(rule + "_NARROWED")
	case u == nil && isFalse(o):
		x.add(rule + "_ADDED")
	case u == nil:
		x.add(rule + "_EXTENDED")
	case isFalse(o) && !isFalse(u):
		x.add(rule + "_ADDED")
	case !isFalse(o) && isFalse(u):
		x.add(rule + "_REMOVED")
	case isEmpty(o) && !isEmpty(u):
		x.add(rule + "_NARROWED")
	case !isEmpty(o) && isEmpty(u):
		x.add(rule + "_EXTENDED")
	default:
		x.compare(o, u)
	}
	c.merge(x)
}

func isOpenArray(n *jnode) bool {
	return n.permitsAddlItems && n.addlItems == nil && (n.unevalItems == nil || n.unevalItems.kind == jkEmpty)
}

func partialArray(n *jnode) *jnode {
	if n.addlItems != nil {
		return n.addlItems
	}
	if n.permitsAddlItems && n.unevalItems != nil && n.unevalItems.kind != jkFalse {
		return n.unevalItems
	}
	return nil
}

func (c *jctx) array(o, u *jnode) {
	c.at("items").compareInto(c, o.items, u.items)
	// Tuple items, position by position.
	for i := 0; i < max(len(o.tuple), len(u.tuple)); i++ {
		p := c.at(fmt.Sprintf("%s/%d", o.tupleKey, i))
		switch {
		case i < len(o.tuple) && i < len(u.tuple):
			p.compare(o.tuple[i], u.tuple[i])
		case i < len(o.tuple):
			ot := o.tuple[i]
			if isOpenArray(u) {
				p.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
			} else if partial := partialArray(u); partial != nil {
				s := p.sub()
				s.compare(ot, partial)
				p.merge(s)
				if s.compatible() {
					p.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
				} else {
					p.add("ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
				}
			} else if ot.kind == jkFalse {
				p.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
			} else {
				p.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
			}
		default:
			ut := u.tuple[i]
			if isOpenArray(o) {
				if ut.kind == jkEmpty {
					p.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
				} else {
					p.add("ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
				}
			} else if partial := partialArray(o); partial != nil {
				s := p.sub()
				s.compare(partial, ut)
				p.merge(s)
				if s.compatible() {
					p.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
				} else {
					p.add("ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
				}
			} else {
				p.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
			}
		}
		c.merge(p)
	}
	a := c.at(o.addlItemsKey)
	switch {
	case o.permitsAddlItems != u.permitsAddlItems:
		if o.permitsAddlItems {
			a.add("ADDITIONAL_ITEMS_REMOVED")
		} else {
			a.add("ADDITIONAL_ITEMS_ADDED")
		}
	case o.addlItems == nil && u.addlItems != nil:
		a.add("ADDITIONAL_ITEMS_NARROWED")
	case o.addlItems != nil && u.addlItems == nil:
		a.add("ADDITIONAL_ITEMS_EXTENDED")
	default:
		a.compare(o.addlItems, u.addlItems)
	}
	c.merge(a)
	c.unevaluated("unevaluatedItems", "UNEVALUATED_ITEMS", o.unevalItems, u.unevalItems)
	c.limits("maxItems", "MAX_ITEMS", o.maxItems, u.maxItems)
	c.limits("minItems", "MIN_ITEMS", o.minItems, u.minItems)
	if o.unique != u.unique {
		if o.unique {
			c.addAt("uniqueItems", "UNIQUE_ITEMS_REMOVED")
		} else {
			c.addAt("uniqueItems", "UNIQUE_ITEMS_ADDED")
		}
	}
	c.limits("maxContains", "MAX_CONTAINS", o.maxContains, u.maxContains)
	c.limits("minContains", "MIN_CONTAINS", o.minContains, u.minContains)
}

// compareInto compares o and u in c and hands the findings to parent.
func (c *jctx) compareInto(parent *jctx, o, u *jnode) {
	c.compare(o, u)
	parent.merge(c)
}
