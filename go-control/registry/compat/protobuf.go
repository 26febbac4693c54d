package compat

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf rules, after Confluent's: the writer's descriptors are compared
// with the reader's, message by message (full name) and field by field
// (field number, which is what the wire carries).
//   - PACKAGE_CHANGED, MESSAGE_REMOVED, ENUM_REMOVED: incompatible.
//   - A field number missing in the reader: compatible (unknown fields are
//     skipped), unless it was required (REQUIRED_FIELD_REMOVED) or part of a
//     oneof (ONEOF_FIELD_REMOVED).
//   - Same number, other kind (scalar/enum/message): FIELD_KIND_CHANGED.
//   - Same number, scalar types of different wire encodings:
//     FIELD_SCALAR_KIND_CHANGED. Wire-compatible groups are
//     {int32,int64,uint32,uint64,bool}, {sint32,sint64}, {fixed32,sfixed32},
//     {fixed64,sfixed64}, {string,bytes}, {float}, {double}.
//   - Same number, other message or enum type: FIELD_NAMED_TYPE_CHANGED.
//   - repeated <-> singular on a numeric field: FIELD_NUMERIC_LABEL_CHANGED
//     (packed encoding differs); on string, bytes and messages it is fine.
//   - A required field in the reader absent from the writer: REQUIRED_FIELD_ADDED.
//   - Fields moved into a oneof the writer already had:
//     FIELD_MOVED_TO_EXISTING_ONEOF; several fields moved into a new oneof:
//     MULTIPLE_FIELDS_MOVED_TO_ONEOF.
//   - Renaming a field or adding an optional one: compatible.

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

type protoChecker struct {
	who    roles
	issues []Issue
}

func (c *protoChecker) add(rule, path, format string, args ...any) {
	c.issues = append(c.issues, Issue{Rule: rule, Path: path, Description: fmt.Sprintf(format, args...)})
}

func protoCanRead(r, w *protoSchema, who roles) []Issue {
	c := &protoChecker{who: who}
	if r.file.Package() != w.file.Package() {
		c.add("PACKAGE_CHANGED", "/package", "the package is '%s' in the %s schema but '%s' in the %s schema",
			r.file.Package(), c.who.reader, w.file.Package(), c.who.writer)
		return c.issues
	}
	rMsgs, rEnums := map[protoreflect.FullName]protoreflect.MessageDescriptor{}, map[protoreflect.FullName]bool{}
	var wMsgs []protoreflect.MessageDescriptor
	var wEnums []protoreflect.EnumDescriptor
	collectProto(r.file.Messages(), r.file.Enums(), func(m protoreflect.MessageDescriptor) { rMsgs[m.FullName()] = m },
		func(e protoreflect.EnumDescriptor) { rEnums[e.FullName()] = true }, 0)
	collectProto(w.file.Messages(), w.file.Enums(), func(m protoreflect.MessageDescriptor) { wMsgs = append(wMsgs, m) },
		func(e protoreflect.EnumDescriptor) { wEnums = append(wEnums, e) }, 0)
	for _, e := range wEnums {
		if !rEnums[e.FullName()] {
			c.add("ENUM_REMOVED", "/"+string(e.FullName()), "enum '%s' of the %s schema is missing in the %s schema",
				e.FullName(), c.who.writer, c.who.reader)
		}
	}
	for _, wm := range wMsgs {
		rm, ok := rMsgs[wm.FullName()]
		if !ok {
			c.add("MESSAGE_REMOVED", "/"+string(wm.FullName()), "message '%s' of the %s schema is missing in the %s schema",
				wm.FullName(), c.who.writer, c.who.reader)
			continue
		}
		c.message(rm, wm)
	}
	return c.issues
}

func collectProto(msgs protoreflect.MessageDescriptors, enums protoreflect.EnumDescriptors,
	onMsg func(protoreflect.MessageDescriptor), onEnum func(protoreflect.EnumDescriptor), depth int) {
	if depth > nestingDepthMax {
		return
	}
	for i := 0; i < enums.Len(); i++ {
		onEnum(enums.Get(i))
	}
	for i := 0; i < msgs.Len(); i++ {
		m := msgs.Get(i)
		onMsg(m)
		collectProto(m.Messages(), m.Enums(), onMsg, onEnum, depth+1)
	}
}

type kindClass int

const (
	classScalar kindClass = iota
	classEnum
	classMessage
)

func classOf(k protoreflect.Kind) kindClass {
	switch k {
	case protoreflect.EnumKind:
		return classEnum
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return classMessage
	}
	return classScalar
}

func wireGroup(k protoreflect.Kind) string {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "bytes"
	}
	return k.String()
}

func realOneof(f protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	o := f.ContainingOneof()
	if o == nil || o.IsSynthetic() {
		return nil
	}
	return o
}

func fieldTypeName(f protoreflect.FieldDescriptor) string {
	switch classOf(f.Kind()) {
	case classMessage:
		return string(f.Message().FullName())
	case classEnum:
		return string(f.Enum().FullName())
	}
	return f.Kind().String()
}

func (c *protoChecker) message(rm, wm protoreflect.MessageDescriptor) {
	base := "/" + string(wm.FullName())
	rFields, wFields := rm.Fields(), wm.Fields()
	for i := 0; i < wFields.Len(); i++ {
		wf := wFields.Get(i)
		path := fmt.Sprintf("%s/%d", base, wf.Number())
		rf := rFields.ByNumber(wf.Number())
		if rf == nil {
			switch {
			case wf.Cardinality() == protoreflect.Required:
				c.add("REQUIRED_FIELD_REMOVED", path, "required field '%s' (number %d) of the %s schema is missing in the %s schema",
					wf.Name(), wf.Number(), c.who.writer, c.who.reader)
			case realOneof(wf) != nil:
				c.add("ONEOF_FIELD_REMOVED", path, "field '%s' (number %d) of oneof '%s' in the %s schema is missing in the %s schema",
					wf.Name(), wf.Number(), realOneof(wf).Name(), c.who.writer, c.who.reader)
			}
			continue
		}
		rc, wc := classOf(rf.Kind()), classOf(wf.Kind())
		switch {
		case rc != wc:
			c.add("FIELD_KIND_CHANGED", path, "field number %d is '%s %s' in the %s schema but '%s %s' in the %s schema",
				wf.Number(), fieldTypeName(rf), rf.Name(), c.who.reader, fieldTypeName(wf), wf.Name(), c.who.writer)
			continue
		case rc == classScalar && wireGroup(rf.Kind()) != wireGroup(wf.Kind()):
			c.add("FIELD_SCALAR_KIND_CHANGED", path, "field number %d is %s in the %s schema but %s in the %s schema, which encode differently",
				wf.Number(), rf.Kind(), c.who.reader, wf.Kind(), c.who.writer)
			continue
		case rc != classScalar && fieldTypeName(rf) != fieldTypeName(wf):
			c.add("FIELD_NAMED_TYPE_CHANGED", path, "field number %d has type '%s' in the %s schema but '%s' in the %s schema",
				wf.Number(), fieldTypeName(rf), c.who.reader, fieldTypeName(wf), c.who.writer)
			continue
		}
		rRep, wRep := rf.Cardinality() == protoreflect.Repeated, wf.Cardinality() == protoreflect.Repeated
		lengthDelimited := rc == classMessage || wireGroup(rf.Kind()) == "bytes"
		if rRep != wRep && !lengthDelimited && !rf.IsMap() && !wf.IsMap() {
			c.add("FIELD_NUMERIC_LABEL_CHANGED", path, "numeric field number %d is %s in the %s schema but %s in the %s schema",
				wf.Number(), cardinality(rf), c.who.reader, cardinality(wf), c.who.writer)
		}
		if rf.IsMap() != wf.IsMap() {
			c.add("FIELD_KIND_CHANGED", path, "field number %d is a map in one schema and not in the other", wf.Number())
		}
		if rf.Cardinality() == protoreflect.Required && wf.Cardinality() != protoreflect.Required {
			c.add("REQUIRED_FIELD_ADDED", path, "field '%s' (number %d) is required in the %s schema but not in the %s schema",
				rf.Name(), rf.Number(), c.who.reader, c.who.writer)
		}
	}
	for i := 0; i < rFields.Len(); i++ {
		rf := rFields.Get(i)
		if wFields.ByNumber(rf.Number()) == nil && rf.Cardinality() == protoreflect.Required {
			c.add("REQUIRED_FIELD_ADDED", fmt.Sprintf("%s/%d", base, rf.Number()),
				"required field '%s' (number %d) of the %s schema is missing in the %s schema",
				rf.Name(), rf.Number(), c.who.reader, c.who.writer)
		}
	}
	// Fields that move into a oneof change meaning: setting one now clears
	// the others.
	oneofs := rm.Oneofs()
	for i := 0; i < oneofs.Len(); i++ {
		o := oneofs.Get(i)
		if o.IsSynthetic() {
			continue
		}
		var moved []string
		for j := 0; j < o.Fields().Len(); j++ {
			rf := o.Fields().Get(j)
			if wf := wFields.ByNumber(rf.Number()); wf != nil && realOneof(wf) == nil {
				moved = append(moved, string(wf.Name()))
			}
		}
		path := base + "/oneof/" + string(o.Name())
		existed := wm.Oneofs().ByName(o.Name()) != nil
		switch {
		case existed && len(moved) > 0:
			c.add("FIELD_MOVED_TO_EXISTING_ONEOF", path, "fields %v were moved into the existing oneof '%s' in the %s schema",
				moved, o.Name(), c.who.reader)
		case !existed && len(moved) > 1:
			c.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF", path, "fields %v were moved together into the new oneof '%s' in the %s schema",
				moved, o.Name(), c.who.reader)
		}
	}
}

func cardinality(f protoreflect.FieldDescriptor) string {
	if f.Cardinality() == protoreflect.Repeated {
		return "repeated"
	}
	return "singular"
}
