package compat

import (
	"fmt"
	"strings"
)

// jsonFields lists the properties and items of s, by the paths their
// differences use.
func jsonFields(w *fieldWalker, s *jsonSchema) {
	seen := map[*jnode]bool{}
	root := s.model
	w.add(Field{Path: "#/", Type: jsonTypeName(root, 0), Deprecated: root.deprecated})
	jsonWalk(w, root, "", seen, 0)
}

func jsonWalk(w *fieldWalker, n *jnode, path string, seen map[*jnode]bool, depth int) {
	n = jderef(n)
	if n == nil || seen[n] || w.full() || depth > nestingDepthMax {
		return
	}
	seen[n] = true
	defer delete(seen, n)
	child := func(p string, c *jnode, required bool) {
		w.add(Field{Path: jsonPathString(p), Name: p[strings.LastIndexByte(p, '/')+1:], Type: jsonTypeName(c, 0),
			Required: required, Deprecated: c.deprecated || jderef(c).deprecated})
		jsonWalk(w, c, p, seen, depth+1)
	}
	switch n.kind {
	case jkObject:
		for _, k := range n.propOrder {
			child(path+"/properties/"+k, n.props[k], n.required[k])
		}
	case jkArray:
		if n.items != nil {
			child(path+"/items", n.items, false)
		}
		for i, t := range n.tuple {
			child(fmt.Sprintf("%s/%s/%d", path, n.tupleKey, i), t, false)
		}
	case jkCombined:
		for i, sub := range uniqueSubs(n.subs) {
			jsonWalk(w, sub, fmt.Sprintf("%s/%s/%d", path, n.criterion, i), seen, depth+1)
		}
	}
}

// jsonTypeName renders a node's type for the contract.
func jsonTypeName(n *jnode, depth int) string {
	if n == nil {
		return "any"
	}
	if depth > 4 {
		return "…"
	}
	switch n.kind {
	case jkRef:
		return n.ref
	case jkEmpty:
		return "any"
	case jkFalse:
		return "none"
	case jkNumber:
		if n.integer {
			return "integer"
		}
		return "number"
	case jkArray:
		if n.items != nil {
			return "array<" + jsonTypeName(n.items, depth+1) + ">"
		}
		if len(n.tuple) > 0 {
			parts := make([]string, len(n.tuple))
			for i, t := range n.tuple {
				parts[i] = jsonTypeName(t, depth+1)
			}
			return "array[" + strings.Join(parts, ", ") + "]"
		}
		return "array"
	case jkEnum:
		vals := make([]string, 0, len(n.values))
		for _, v := range n.values {
			vals = append(vals, canonicalJSON(v))
		}
		return "enum[" + truncate(strings.Join(vals, ", "), 80) + "]"
	case jkConst:
		return "const " + truncate(canonicalJSON(n.constVal), 80)
	case jkCombined:
		parts := make([]string, 0, len(n.subs))
		for _, s := range n.subs {
			parts = append(parts, jsonTypeName(s, depth+1))
		}
		sep := " | "
		if n.criterion == "allOf" {
			sep = " & "
		}
		return strings.Join(parts, sep)
	case jkNot:
		return "not " + jsonTypeName(n.not, depth+1)
	case jkConditional:
		return "if/then/else"
	}
	return n.kind.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
