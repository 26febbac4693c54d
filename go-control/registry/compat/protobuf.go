package compat

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Protobuf differences, after Confluent's ProtobufSchema diff: messages and
// enums are matched by name, fields by number across the whole message
// (inside a oneof or not), oneofs by name, and each difference has
// Confluent's Difference.Type name (FIELD_ADDED, ONEOF_REMOVED,
// FIELD_MOVED_TO_EXISTING_ONEOF, ...). Compatible are: package changes,
// message and enum additions, enum and enum value changes, message moves,
// field additions and removals (unknown fields are skipped), renames,
// string/bytes label changes, oneof additions, renames and whole
// removals, fields added to a oneof or moved out of one. Breaking besides
// type changes: a oneof member dropped (also when its oneof is renamed or
// merged), and fields a oneof makes exclusive that were not (moved into
// it from outside or from another oneof). Scalar types are compared by
// wire encoding (Confluent's groups: int32, int64, uint32, uint64, bool
// and enums share varint; sint32/sint64; fixed32/sfixed32;
// fixed64/sfixed64; string/bytes; float; double), message-typed fields by
// the message they name, whose fields are compared in turn, through
// imports (references) alike.

type protoSchema struct {
	file      protoreflect.FileDescriptor
	canonical string
}

func (*protoSchema) Type() Type          { return Protobuf }
func (s *protoSchema) Canonical() string { return s.canonical }

// protoMainFile is the path the schema being parsed compiles under; a
// reference with that very name is refused.
const protoMainFile = "sluice_registry_input.proto"

func parseProtobuf(text string, deps []Dependency) (res Schema, err error) {
	srcs := map[string]string{protoMainFile: text}
	for _, d := range deps {
		if d.Name == protoMainFile {
			return nil, invalid("reference name %q is reserved", d.Name)
		}
		srcs[d.Name] = d.Schema
	}
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				src, ok := srcs[path]
				if !ok {
					return nil, fmt.Errorf("import %q is not a known reference", path)
				}
				return io.NopCloser(strings.NewReader(src)), nil
			},
		}),
		MaxParallelism: 1,
	}
	files, err := comp.Compile(context.Background(), protoMainFile)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if len(files) != 1 {
		return nil, invalid("protobuf compiler returned %d files", len(files))
	}
	return &protoSchema{file: files[0], canonical: strings.TrimSpace(text)}, nil
}

var protoCompatible = map[string]bool{
	"PACKAGE_CHANGED": true, "MESSAGE_ADDED": true, "MESSAGE_MOVED": true,
	"ENUM_ADDED": true, "ENUM_REMOVED": true, "ENUM_CONST_ADDED": true, "ENUM_CONST_CHANGED": true, "ENUM_CONST_REMOVED": true,
	"FIELD_ADDED": true, "FIELD_REMOVED": true, "FIELD_NAME_CHANGED": true, "FIELD_STRING_OR_BYTES_LABEL_CHANGED": true,
	"ONEOF_ADDED": true, "ONEOF_REMOVED": true, "ONEOF_FIELD_ADDED": true,
	// Confluent's newest: a oneof member made a plain field keeps its
	// number and type; only the exclusivity is gone.
	"ONEOF_FIELD_MOVED_TO_TOP_LEVEL": true,
	// Sluice's own: a scalar type changed within its wire encoding group.
	"FIELD_SCALAR_TYPE_CHANGED": true,
}

// protoBuf is the most lenient buf breaking category (FILE, PACKAGE,
// WIRE_JSON, WIRE) whose rules flag each difference.
var protoBuf = map[string]string{
	"PACKAGE_CHANGED":                     "WIRE",      // FILE_SAME_PACKAGE
	"MESSAGE_REMOVED":                     "PACKAGE",   // MESSAGE_NO_DELETE
	"ENUM_REMOVED":                        "PACKAGE",   // ENUM_NO_DELETE
	"ENUM_CONST_REMOVED":                  "WIRE_JSON", // ENUM_VALUE_NO_DELETE_UNLESS_NAME_RESERVED
	"ENUM_CONST_CHANGED":                  "WIRE_JSON", // ENUM_VALUE_SAME_NAME
	"FIELD_REMOVED":                       "WIRE",      // FIELD_NO_DELETE_UNLESS_NUMBER_RESERVED
	"REQUIRED_FIELD_REMOVED":              "WIRE",
	"ONEOF_FIELD_REMOVED":                 "WIRE",
	"FIELD_NAME_CHANGED":                  "WIRE_JSON", // FIELD_SAME_JSON_NAME
	"FIELD_KIND_CHANGED":                  "WIRE",      // FIELD_WIRE_COMPATIBLE_TYPE
	"FIELD_SCALAR_KIND_CHANGED":           "WIRE",
	"FIELD_NAMED_TYPE_CHANGED":            "WIRE",
	"FIELD_SCALAR_TYPE_CHANGED":           "WIRE_JSON", // FIELD_WIRE_JSON_COMPATIBLE_TYPE
	"FIELD_NUMERIC_LABEL_CHANGED":         "WIRE",      // FIELD_WIRE_COMPATIBLE_CARDINALITY
	"FIELD_STRING_OR_BYTES_LABEL_CHANGED": "WIRE_JSON", // FIELD_WIRE_JSON_COMPATIBLE_CARDINALITY
	"REQUIRED_FIELD_ADDED":                "WIRE",      // FIELD_SAME_LABEL
	"ONEOF_REMOVED":                       "PACKAGE",   // ONEOF_NO_DELETE
	"MULTIPLE_FIELDS_MOVED_TO_ONEOF":      "WIRE",      // FIELD_SAME_ONEOF
	"FIELD_MOVED_TO_EXISTING_ONEOF":       "WIRE",
	"ONEOF_FIELD_MOVED_TO_TOP_LEVEL":      "WIRE",
}

// pctx is one directional Protobuf comparison: the path (Confluent's
// "#/Message/field-number" form, package left out) and what was found.
type pctx struct {
	s     side
	path  []string
	out   *[]finding
	stack map[protoreflect.FullName]bool // original messages being compared
	steps *int
}

func protoCompare(original, update Schema, s side) []finding {
	o, u := original.(*protoSchema), update.(*protoSchema)
	var out []finding
	steps := 0
	c := &pctx{s: s, out: &out, stack: map[protoreflect.FullName]bool{}, steps: &steps}
	if o.file.Package() != u.file.Package() {
		c.add("PACKAGE_CHANGED", fmt.Sprintf("the package is '%s' in the %s schema and '%s' in the %s schema",
			o.file.Package(), s.orig, u.file.Package(), s.upd))
	}
	c.types(o.file.Messages(), o.file.Enums(), u.file.Messages(), u.file.Enums())
	if steps > compareStepsMax {
		out = append(out, finding{path: "#/", rule: "DIFF_LIMIT_EXCEEDED",
			message: fmt.Sprintf("the comparison stopped after %d steps", compareStepsMax)})
	}
	return out
}

func (c *pctx) pathString() string { return "#/" + strings.Join(c.path, "/") }

func (c *pctx) enter(step string) *pctx {
	n := *c
	n.path = append(append([]string(nil), c.path...), step)
	return &n
}

func (c *pctx) add(rule, msg string) {
	*c.out = append(*c.out, finding{path: c.pathString(), rule: rule, ok: protoCompatible[rule], message: msg, buf: protoBuf[rule]})
}

// sub is a scratch comparison whose findings stay apart.
func (c *pctx) sub() (*pctx, *[]finding) {
	var out []finding
	n := *c
	n.out = &out
	n.stack = make(map[protoreflect.FullName]bool, len(c.stack))
	for k, v := range c.stack {
		n.stack[k] = v
	}
	return &n, &out
}

func allOK(fs []finding) bool {
	for _, f := range fs {
		if !f.ok {
			return false
		}
	}
	return true
}

func messagesOf(ms protoreflect.MessageDescriptors) (map[string]protoreflect.MessageDescriptor, map[string]int, []string) {
	byName := map[string]protoreflect.MessageDescriptor{}
	index := map[string]int{}
	var order []string
	n := 0
	for i := 0; i < ms.Len(); i++ {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue // map<K,V> is a field type, not a message of the schema
		}
		name := string(m.Name())
		byName[name], index[name] = m, n
		order = append(order, name)
		n++
	}
	return byName, index, order
}

// types compares the messages and enums declared in one scope (the file
// or a message).
func (c *pctx) types(om protoreflect.MessageDescriptors, oe protoreflect.EnumDescriptors,
	um protoreflect.MessageDescriptors, ue protoreflect.EnumDescriptors) {
	if len(c.path) > nestingDepthMax {
		return
	}
	oMsgs, oIdx, oOrder := messagesOf(om)
	uMsgs, uIdx, uOrder := messagesOf(um)
	for _, name := range unionOrder(oOrder, uOrder) {
		n := c.enter(name)
		o, u := oMsgs[name], uMsgs[name]
		switch {
		case u == nil:
			n.add("MESSAGE_REMOVED", fmt.Sprintf("the %s schema is missing the message '%s' of the %s schema", c.s.upd, o.FullName(), c.s.orig))
		case o == nil:
			n.add("MESSAGE_ADDED", fmt.Sprintf("the %s schema adds the message '%s'", c.s.upd, u.FullName()))
		default:
			n.message(o, u)
			if oIdx[name] != uIdx[name] {
				n.add("MESSAGE_MOVED", fmt.Sprintf("the message '%s' moved from position %d to %d", u.FullName(), oIdx[name], uIdx[name]))
			}
		}
	}
	oEnums, uEnums := map[string]protoreflect.EnumDescriptor{}, map[string]protoreflect.EnumDescriptor{}
	var oNames, uNames []string
	for i := 0; i < oe.Len(); i++ {
		oEnums[string(oe.Get(i).Name())] = oe.Get(i)
		oNames = append(oNames, string(oe.Get(i).Name()))
	}
	for i := 0; i < ue.Len(); i++ {
		uEnums[string(ue.Get(i).Name())] = ue.Get(i)
		uNames = append(uNames, string(ue.Get(i).Name()))
	}
	for _, name := range unionOrder(oNames, uNames) {
		n := c.enter(name)
		o, u := oEnums[name], uEnums[name]
		switch {
		case u == nil:
			n.add("ENUM_REMOVED", fmt.Sprintf("the %s schema drops the enum '%s'", c.s.upd, o.FullName()))
		case o == nil:
			n.add("ENUM_ADDED", fmt.Sprintf("the %s schema adds the enum '%s'", c.s.upd, u.FullName()))
		default:
			n.enum(o, u)
		}
	}
}

// unionOrder lists a's elements, then b's that a lacks.
func unionOrder[T comparable](a, b []T) []T {
	seen := make(map[T]bool, len(a)+len(b))
	out := make([]T, 0, len(a)+len(b))
	for _, l := range [][]T{a, b} {
		for _, s := range l {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func (c *pctx) enum(o, u protoreflect.EnumDescriptor) {
	ov, uv := o.Values(), u.Values()
	byNum := func(vs protoreflect.EnumValueDescriptors) (map[protoreflect.EnumNumber]string, []protoreflect.EnumNumber) {
		m := map[protoreflect.EnumNumber]string{}
		var order []protoreflect.EnumNumber
		for i := 0; i < vs.Len(); i++ {
			v := vs.Get(i)
			if _, dup := m[v.Number()]; dup {
				continue // an alias (allow_alias): the first name stands
			}
			m[v.Number()] = string(v.Name())
			order = append(order, v.Number())
		}
		return m, order
	}
	om, oo := byNum(ov)
	um, uo := byNum(uv)
	for _, k := range unionOrder(oo, uo) {
		num := fmt.Sprint(int32(k))
		n := c.enter(num)
		on, oHas := om[k]
		un, uHas := um[k]
		switch {
		case !uHas:
			n.add("ENUM_CONST_REMOVED", fmt.Sprintf("the %s schema drops the enum value %s = %s", c.s.upd, on, num))
		case !oHas:
			n.add("ENUM_CONST_ADDED", fmt.Sprintf("the %s schema adds the enum value %s = %s", c.s.upd, un, num))
		case on != un:
			n.add("ENUM_CONST_CHANGED", fmt.Sprintf("the enum value %s is named %s in the %s schema and %s in the %s schema", num, on, c.s.orig, un, c.s.upd))
		}
	}
}

// label is the field's label as Confluent's parser (Wire) reads the text:
// empty for proto3 fields without one, oneof members and maps.
func label(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return ""
	case f.Cardinality() == protoreflect.Repeated:
		return "repeated"
	case f.Cardinality() == protoreflect.Required:
		return "required"
	case realOneof(f) != nil:
		return ""
	case f.ParentFile().Syntax() == protoreflect.Proto2 || f.HasOptionalKeyword():
		return "optional"
	}
	return ""
}

type protoKind int

const (
	pkScalar protoKind = iota // scalars and enums
	pkMap
	pkMessage
)

func kindOf(f protoreflect.FieldDescriptor) protoKind {
	switch {
	case f.IsMap():
		return pkMap
	case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
		return pkMessage
	}
	return pkScalar
}

// scalarGroup is Confluent's wire-encoding group of a scalar (enums
// encode as varints).
func scalarGroup(k protoreflect.Kind) string {
	switch k {
	case protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "bytes"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	}
	return k.String()
}

func typeString(f protoreflect.FieldDescriptor) string {
	switch {
	case f.IsMap():
		return fmt.Sprintf("map<%s, %s>", typeString(f.MapKey()), typeString(f.MapValue()))
	case f.Kind() == protoreflect.MessageKind || f.Kind() == protoreflect.GroupKind:
		return string(f.Message().FullName())
	case f.Kind() == protoreflect.EnumKind:
		return string(f.Enum().FullName())
	}
	return f.Kind().String()
}

func (c *pctx) field(o, u protoreflect.FieldDescriptor) {
	if o.Name() != u.Name() {
		c.add("FIELD_NAME_CHANGED", fmt.Sprintf("field number %d is named '%s' in the %s schema and '%s' in the %s schema", o.Number(), o.Name(), c.s.orig, u.Name(), c.s.upd))
	}
	c.labelsAndTypes(o, u, label(o), label(u))
}

func (c *pctx) labelsAndTypes(o, u protoreflect.FieldDescriptor, ol, ul string) {
	ok, uk := kindOf(o), kindOf(u)
	if ok != uk {
		c.add("FIELD_KIND_CHANGED", fmt.Sprintf("the field at '%s' is '%s' in the %s schema and '%s' in the %s schema", c.pathString(), typeString(o), c.s.orig, typeString(u), c.s.upd))
		return
	}
	switch ok {
	case pkScalar:
		og, ug := scalarGroup(o.Kind()), scalarGroup(u.Kind())
		if og != ug {
			c.add("FIELD_SCALAR_KIND_CHANGED", fmt.Sprintf("the field at '%s' is %s in the %s schema and %s in the %s schema, which encode differently",
				c.pathString(), typeString(o), c.s.orig, typeString(u), c.s.upd))
			return
		}
		if typeString(o) != typeString(u) && (o.Kind() != protoreflect.EnumKind || u.Kind() != protoreflect.EnumKind) {
			c.add("FIELD_SCALAR_TYPE_CHANGED", fmt.Sprintf("the field at '%s' is %s in the %s schema and %s in the %s schema, with the same wire encoding",
				c.pathString(), typeString(o), c.s.orig, typeString(u), c.s.upd))
		}
		// Confluent compares labels only when both fields spell one; a
		// proto3 field without label reads as optional here, so that a
		// numeric field made repeated (packed) is caught (docs/schemas.md).
		if og != "bytes" {
			ol, ul = orOptional(ol), orOptional(ul)
		}
		if ol != "" && ul != "" && ol != ul {
			if og == "bytes" {
				c.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED", fmt.Sprintf("the field at '%s' is %s in the %s schema and %s in the %s schema", c.pathString(), ol, c.s.orig, ul, c.s.upd))
			} else {
				c.add("FIELD_NUMERIC_LABEL_CHANGED", fmt.Sprintf("the numeric field at '%s' is %s in the %s schema and %s in the %s schema, which encode differently (packed)",
					c.pathString(), ol, c.s.orig, ul, c.s.upd))
			}
		}
	case pkMessage:
		c.messageTypes(o.Message(), u.Message())
	case pkMap:
		c.labelsAndTypes(o.MapKey(), u.MapKey(), "", "")
		c.labelsAndTypes(o.MapValue(), u.MapValue(), "", "")
	}
}

func orOptional(l string) string {
	if l == "" {
		return "optional"
	}
	return l
}

// localName is a message's full name without its file's package.
func localName(m protoreflect.MessageDescriptor) string {
	full := string(m.FullName())
	if pkg := string(m.ParentFile().Package()); pkg != "" {
		return strings.TrimPrefix(full, pkg+".")
	}
	return full
}

// messageTypes compares the messages two message-typed fields name: by
// their name within the package, then field by field.
func (c *pctx) messageTypes(o, u protoreflect.MessageDescriptor) {
	ol, ul := localName(o), localName(u)
	if ol != ul {
		c.add("FIELD_NAMED_TYPE_CHANGED", fmt.Sprintf("the field at '%s' has type '%s' in the %s schema and '%s' in the %s schema", c.pathString(), o.FullName(), c.s.orig, u.FullName(), c.s.upd))
		return
	}
	if c.stack[o.FullName()] {
		return // recursive: compatible unless shown otherwise
	}
	s, out := c.sub()
	s.path = strings.Split(ol, ".")
	s.message(o, u)
	*c.out = append(*c.out, *out...)
	if !allOK(*out) {
		c.add("FIELD_NAMED_TYPE_CHANGED", fmt.Sprintf("the message '%s' of the field at '%s' changed incompatibly", ol, c.pathString()))
	}
}

// protoFields lists every message, enum and field of s.
func protoFields(w *fieldWalker, s *protoSchema) {
	protoScope(w, nil, s.file.Messages(), s.file.Enums(), 0)
}

func protoScope(w *fieldWalker, path []string, ms protoreflect.MessageDescriptors, es protoreflect.EnumDescriptors, depth int) {
	if depth > nestingDepthMax {
		return
	}
	for i := 0; i < ms.Len() && !w.full(); i++ {
		m := ms.Get(i)
		if m.IsMapEntry() {
			continue
		}
		mp := append(append([]string(nil), path...), string(m.Name()))
		mopts, _ := m.Options().(*descriptorpb.MessageOptions)
		w.add(Field{Path: "#/" + strings.Join(mp, "/"), Name: string(m.Name()), Type: "message " + string(m.FullName()), Deprecated: mopts.GetDeprecated()})
		for j := 0; j < m.Fields().Len(); j++ {
			f := m.Fields().Get(j)
			fp := append([]string(nil), mp...)
			if o := realOneof(f); o != nil {
				fp = append(fp, string(o.Name()))
			}
			fp = append(fp, fmt.Sprint(int32(f.Number())))
			opts, _ := f.Options().(*descriptorpb.FieldOptions)
			t := typeString(f)
			if l := label(f); l != "" {
				t = l + " " + t
			}
			w.add(Field{Path: "#/" + strings.Join(fp, "/"), Name: string(f.Name()), Type: t,
				Required: f.Cardinality() == protoreflect.Required, Deprecated: opts.GetDeprecated()})
		}
		protoScope(w, mp, m.Messages(), m.Enums(), depth+1)
	}
	for i := 0; i < es.Len(); i++ {
		e := es.Get(i)
		opts, _ := e.Options().(*descriptorpb.EnumOptions)
		w.add(Field{Path: "#/" + strings.Join(append(append([]string(nil), path...), string(e.Name())), "/"), Name: string(e.Name()),
			Type: "enum " + string(e.FullName()), Deprecated: opts.GetDeprecated()})
	}
}
