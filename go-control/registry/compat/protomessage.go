package compat

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

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

func (c *pctx) fields(o, u protoreflect.MessageDescriptor) {
	oPlain, uPlain := map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}, map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}
	oInOneof := map[protoreflect.FieldNumber]bool{}
	var oOrder, uOrder []protoreflect.FieldNumber
	for i := 0; i < o.Fields().Len(); i++ {
		f := o.Fields().Get(i)
		if realOneof(f) != nil {
			oInOneof[f.Number()] = true
			continue
		}
		oPlain[f.Number()] = f
		oOrder = append(oOrder, f.Number())
	}
	for i := 0; i < u.Fields().Len(); i++ {
		f := u.Fields().Get(i)
		if realOneof(f) != nil {
			continue
		}
		uPlain[f.Number()] = f
		uOrder = append(uOrder, f.Number())
	}
	// Fields that move into a oneof: the oneof may hold one value only, so
	// two fields set together cannot both survive.
	var oneofNames []string
	for i := 0; i < u.Oneofs().Len(); i++ {
		od := u.Oneofs().Get(i)
		if od.IsSynthetic() {
			continue
		}
		oneofNames = append(oneofNames, string(od.Name()))
		moved, existing := 0, 0
		var movedNames []string
		for j := 0; j < od.Fields().Len(); j++ {
			f := od.Fields().Get(j)
			if of, ok := oPlain[f.Number()]; ok {
				delete(oPlain, f.Number())
				moved++
				movedNames = append(movedNames, string(of.Name()))
			} else if oInOneof[f.Number()] {
				existing++
			}
		}
		n := c.enter(string(od.Name()))
		switch {
		case moved > 1:
			n.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", fmt.Sprintf("the fields %v, outside a oneof in the %s schema, are together in the oneof '%s' of the %s schema",
				movedNames, c.s.orig, od.Name(), c.s.upd))
		case moved == 1 && existing > 0:
			n.add("FIELD_MOVED_TO_EXISTING_ONEOF", fmt.Sprintf("the field %v, outside a oneof in the %s schema, joins fields that were already in a oneof, in the oneof '%s' of the %s schema",
				movedNames, c.s.orig, od.Name(), c.s.upd))
		}
	}
	var oNames []string
	for i := 0; i < o.Oneofs().Len(); i++ {
		if od := o.Oneofs().Get(i); !od.IsSynthetic() {
			oNames = append(oNames, string(od.Name()))
		}
	}
	for _, name := range unionOrder(oNames, oneofNames) {
		n := c.enter(name)
		oo, uo := o.Oneofs().ByName(protoreflect.Name(name)), u.Oneofs().ByName(protoreflect.Name(name))
		if oo != nil && oo.IsSynthetic() {
			oo = nil
		}
		if uo != nil && uo.IsSynthetic() {
			uo = nil
		}
		switch {
		case uo == nil:
			n.add("ONEOF_REMOVED", fmt.Sprintf("the %s schema drops the oneof '%s'", c.s.upd, name))
		case oo == nil:
			n.add("ONEOF_ADDED", fmt.Sprintf("the %s schema adds the oneof '%s'", c.s.upd, name))
		default:
			n.oneof(oo, uo)
		}
	}
	for _, k := range unionOrder(oOrder, uOrder) {
		of, uf := oPlain[k], uPlain[k]
		if of == nil && uf == nil {
			continue // moved into a oneof: judged above
		}
		num := fmt.Sprint(int32(k))
		n := c.enter(num)
		switch {
		case uf == nil:
			if of.Cardinality() == protoreflect.Required {
				n.add("REQUIRED_FIELD_REMOVED", fmt.Sprintf("the %s schema is missing the required field '%s' (number %s) of the %s schema", c.s.upd, of.Name(), num, c.s.orig))
			} else {
				n.add("FIELD_REMOVED", fmt.Sprintf("the %s schema drops the field '%s' (number %s)", c.s.upd, of.Name(), num))
			}
		case of == nil:
			if uf.Cardinality() == protoreflect.Required {
				n.add("REQUIRED_FIELD_ADDED", fmt.Sprintf("the %s schema adds the required field '%s' (number %s), which the %s schema's data lacks", c.s.upd, uf.Name(), num, c.s.orig))
			} else {
				n.add("FIELD_ADDED", fmt.Sprintf("the %s schema adds the field '%s' (number %s)", c.s.upd, uf.Name(), num))
			}
		default:
			n.field(of, uf)
		}
	}
}

func (c *pctx) oneof(o, u protoreflect.OneofDescriptor) {
	var oo, uo []protoreflect.FieldNumber
	om, um := map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}, map[protoreflect.FieldNumber]protoreflect.FieldDescriptor{}
	for i := 0; i < o.Fields().Len(); i++ {
		f := o.Fields().Get(i)
		om[f.Number()] = f
		oo = append(oo, f.Number())
	}
	for i := 0; i < u.Fields().Len(); i++ {
		f := u.Fields().Get(i)
		um[f.Number()] = f
		uo = append(uo, f.Number())
	}
	for _, k := range unionOrder(oo, uo) {
		num := fmt.Sprint(int32(k))
		of, uf := om[k], um[k]
		n := c.enter(num)
		switch {
		case uf == nil:
			n.add("ONEOF_FIELD_REMOVED", fmt.Sprintf("the %s schema is missing the field '%s' (number %s) of the oneof '%s'", c.s.upd, of.Name(), num, o.Name()))
		case of == nil:
			n.add("ONEOF_FIELD_ADDED", fmt.Sprintf("the %s schema adds the field '%s' (number %s) to the oneof '%s'", c.s.upd, uf.Name(), num, u.Name()))
		default:
			n.field(of, uf)
		}
	}
}
