package compat

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Fields are matched by number across the whole message, oneof members and
// plain fields alike, as Confluent's newest MessageSchemaDiff does: a
// field's oneof may be renamed, merged or left without hiding a change of
// its type or its removal. Oneofs themselves are matched by name, and what
// matters about them is which fields may no longer be set together.

func realOneof(f protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	o := f.ContainingOneof()
	if o == nil || o.IsSynthetic() {
		return nil
	}
	return o
}

// message compares two messages of the same name: oneofs, then fields by
// number, then their nested types.
func (c *pctx) message(o, u protoreflect.MessageDescriptor) {
	*c.steps++
	if *c.steps > compareStepsMax {
		return
	}
	if !c.stack[o.FullName()] {
		c.stack[o.FullName()] = true
		c.fields(o, u)
		delete(c.stack, o.FullName())
	}
	c.types(o.Messages(), o.Enums(), u.Messages(), u.Enums())
}

// members is a message's fields by number, each with the name of its
// (real) oneof, "" outside one.
type members struct {
	byNum  map[protoreflect.FieldNumber]protoreflect.FieldDescriptor
	oneof  map[protoreflect.FieldNumber]string
	order  []protoreflect.FieldNumber
	oneofs []protoreflect.OneofDescriptor
}

func membersOf(m protoreflect.MessageDescriptor) members {
	s := members{byNum: map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}, oneof: map[protoreflect.FieldNumber]string{}}
	for i := 0; i < m.Fields().Len(); i++ {
		f := m.Fields().Get(i)
		s.byNum[f.Number()] = f
		s.order = append(s.order, f.Number())
		if o := realOneof(f); o != nil {
			s.oneof[f.Number()] = string(o.Name())
		}
	}
	for i := 0; i < m.Oneofs().Len(); i++ {
		if o := m.Oneofs().Get(i); !o.IsSynthetic() {
			s.oneofs = append(s.oneofs, o)
		}
	}
	return s
}

func (s members) hasOneof(name string) bool {
	for _, o := range s.oneofs {
		if string(o.Name()) == name {
			return true
		}
	}
	return false
}

func (c *pctx) fields(o, u protoreflect.MessageDescriptor) {
	om, um := membersOf(o), membersOf(u)
	c.exclusivity(om, um)
	// A oneof gone by name with none of its fields left anywhere was
	// deleted whole: its fields were optional by nature, so that is no
	// loss (ONEOF_REMOVED alone). A oneof renamed or split that drops a
	// member loses that member (ONEOF_FIELD_REMOVED).
	deleted := map[string]bool{}
	var oNames, uNames []string
	for _, od := range om.oneofs {
		name := string(od.Name())
		oNames = append(oNames, name)
		if um.hasOneof(name) {
			continue
		}
		survives := false
		for j := 0; j < od.Fields().Len(); j++ {
			if um.byNum[od.Fields().Get(j).Number()] != nil {
				survives = true
			}
		}
		deleted[name] = !survives
	}
	for _, od := range um.oneofs {
		uNames = append(uNames, string(od.Name()))
	}
	for _, name := range unionOrder(oNames, uNames) {
		n := c.enter(name)
		switch {
		case !um.hasOneof(name):
			n.add("ONEOF_REMOVED", fmt.Sprintf("the %s schema drops the oneof '%s'", c.s.upd, name))
		case !om.hasOneof(name):
			n.add("ONEOF_ADDED", fmt.Sprintf("the %s schema adds the oneof '%s'", c.s.upd, name))
		}
	}
	for _, k := range unionOrder(om.order, um.order) {
		of, uf := om.byNum[k], um.byNum[k]
		oo, uo := om.oneof[k], um.oneof[k]
		num := fmt.Sprint(int32(k))
		switch {
		case uf == nil && oo != "":
			if !deleted[oo] {
				c.enter(oo).enter(num).add("ONEOF_FIELD_REMOVED", fmt.Sprintf("the %s schema is missing the field '%s' (number %s) of the oneof '%s'", c.s.upd, of.Name(), num, oo))
			}
		case uf == nil && of.Cardinality() == protoreflect.Required:
			c.enter(num).add("REQUIRED_FIELD_REMOVED", fmt.Sprintf("the %s schema is missing the required field '%s' (number %s) of the %s schema", c.s.upd, of.Name(), num, c.s.orig))
		case uf == nil:
			c.enter(num).add("FIELD_REMOVED", fmt.Sprintf("the %s schema drops the field '%s' (number %s)", c.s.upd, of.Name(), num))
		case of == nil && uo != "":
			c.enter(uo).enter(num).add("ONEOF_FIELD_ADDED", fmt.Sprintf("the %s schema adds the field '%s' (number %s) to the oneof '%s'", c.s.upd, uf.Name(), num, uo))
		case of == nil && uf.Cardinality() == protoreflect.Required:
			c.enter(num).add("REQUIRED_FIELD_ADDED", fmt.Sprintf("the %s schema adds the required field '%s' (number %s), which the %s schema's data lacks", c.s.upd, uf.Name(), num, c.s.orig))
		case of == nil:
			c.enter(num).add("FIELD_ADDED", fmt.Sprintf("the %s schema adds the field '%s' (number %s)", c.s.upd, uf.Name(), num))
		default:
			if oo != "" && uo == "" {
				// Same number and type: it only may be set beside the
				// oneof's other fields now.
				c.enter(num).add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", fmt.Sprintf("the field '%s' (number %s), in the oneof '%s' of the %s schema, is outside any oneof in the %s schema",
					uf.Name(), num, oo, c.s.orig, c.s.upd))
			}
			n := c
			if uo != "" {
				n = n.enter(uo)
			}
			n.enter(num).field(of, uf)
		}
	}
}

// exclusivity finds fields the update's oneofs make mutually exclusive
// that were not: data written with the original may hold both. Fields
// were exclusive only if they shared an original oneof; each original
// plain field stands alone; new fields are no concern (old data lacks
// them).
func (c *pctx) exclusivity(om, um members) {
	for _, od := range um.oneofs {
		groups := map[string]bool{}
		var plain, from []string
		for j := 0; j < od.Fields().Len(); j++ {
			k := od.Fields().Get(j).Number()
			of := om.byNum[k]
			switch {
			case of == nil:
				continue
			case om.oneof[k] != "":
				groups["oneof "+om.oneof[k]] = true
				from = append(from, fmt.Sprintf("'%s' (oneof '%s')", of.Name(), om.oneof[k]))
			default:
				groups[fmt.Sprint("field ", k)] = true
				plain = append(plain, string(of.Name()))
				from = append(from, fmt.Sprintf("'%s'", of.Name()))
			}
		}
		if len(groups) < 2 {
			continue
		}
		n := c.enter(string(od.Name()))
		if len(plain) > 1 {
			n.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", fmt.Sprintf("the fields %s, outside a oneof in the %s schema, are together in the oneof '%s' of the %s schema",
				strings.Join(plain, ", "), c.s.orig, od.Name(), c.s.upd))
		} else {
			n.add("FIELD_MOVED_TO_EXISTING_ONEOF", fmt.Sprintf("the oneof '%s' of the %s schema joins fields the %s schema lets be set together: %s",
				od.Name(), c.s.upd, c.s.orig, strings.Join(from, ", ")))
		}
	}
}
