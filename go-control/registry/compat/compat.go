// Package compat parses the four schema types the Sluice registry accepts
// (AVRO, PROTOBUF, JSON Schema and TENSOR signatures) with real parsers and
// decides whether one schema can read data written with another.
//
// Every rule is expressed as "can the reader schema read what the writer
// schema produced?". A compatibility level picks who is the reader:
// BACKWARD makes the new schema the reader of old data, FORWARD makes the old
// schema the reader of new data, FULL requires both. The transitive forms
// check every live earlier version instead of only the latest one.
package compat

import (
	"errors"
	"fmt"
	"strings"
)

// Type is a schema type name as Confluent spells it.
type Type string

const (
	Avro     Type = "AVRO"
	Protobuf Type = "PROTOBUF"
	JSON     Type = "JSON"
	Tensor   Type = "TENSOR"
)

// Types lists every supported schema type.
var Types = []Type{Avro, Protobuf, JSON, Tensor}

// ParseType accepts a schemaType value; empty means AVRO, as in Confluent.
func ParseType(s string) (Type, error) {
	if s == "" {
		return Avro, nil
	}
	t := Type(strings.ToUpper(s))
	for _, k := range Types {
		if t == k {
			return t, nil
		}
	}
	return "", fmt.Errorf("unsupported schema type %q (want AVRO, PROTOBUF, JSON or TENSOR)", s)
}

// Level is a compatibility level.
type Level string

const (
	None               Level = "NONE"
	Backward           Level = "BACKWARD"
	BackwardTransitive Level = "BACKWARD_TRANSITIVE"
	Forward            Level = "FORWARD"
	ForwardTransitive  Level = "FORWARD_TRANSITIVE"
	Full               Level = "FULL"
	FullTransitive     Level = "FULL_TRANSITIVE"
)

// ParseLevel accepts a level name in any case.
func ParseLevel(s string) (Level, bool) {
	l := Level(strings.ToUpper(strings.TrimSpace(s)))
	switch l {
	case None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive:
		return l, true
	}
	return "", false
}

func (l Level) transitive() bool {
	return l == BackwardTransitive || l == ForwardTransitive || l == FullTransitive
}

func (l Level) backward() bool {
	return l == Backward || l == BackwardTransitive || l == Full || l == FullTransitive
}

func (l Level) forward() bool {
	return l == Forward || l == ForwardTransitive || l == Full || l == FullTransitive
}

// Dependency is a referenced schema, already resolved to its text. Name is
// the reference name: the full type name for Avro, the import path for
// Protobuf, the $ref URL for JSON Schema.
type Dependency struct {
	Name   string
	Schema string
}

// Schema is a parsed schema of one of the four types.
type Schema interface {
	Type() Type
	// Canonical is the text used for identity: two registrations with the
	// same canonical text (and references) share one global id.
	Canonical() string
}

// Limits on input size keep a hostile schema from costing unbounded work.
const (
	SchemaBytesMax  = 1 << 20 // bytes of schema text
	nestingDepthMax = 64      // depth of nested types walked by the checkers
)

// ErrInvalid wraps every parse failure.
var ErrInvalid = errors.New("invalid schema")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Parse parses text as a schema of type t. deps must be ordered so that a
// dependency comes before the schemas that use it.
func Parse(t Type, text string, deps []Dependency) (s Schema, err error) {
	// The parsers are third-party code fed with client input: a panic in
	// one must become a refused schema, not a dead control plane.
	defer func() {
		if p := recover(); p != nil {
			s, err = nil, invalid("parser failed: %v", p)
		}
	}()
	if len(text) > SchemaBytesMax {
		return nil, invalid("schema is %d bytes, more than the limit of %d", len(text), SchemaBytesMax)
	}
	if strings.TrimSpace(text) == "" {
		return nil, invalid("empty schema")
	}
	switch t {
	case Avro:
		return parseAvro(text, deps)
	case Protobuf:
		return parseProtobuf(text, deps)
	case JSON:
		return parseJSONSchema(text, deps)
	case Tensor:
		return parseTensor(text)
	}
	return nil, invalid("unsupported schema type %q", t)
}

// Issue is one reason why a reader cannot read a writer's data.
type Issue struct {
	// Rule is an upper-case error type, e.g. READER_FIELD_MISSING_DEFAULT_VALUE.
	Rule string
	// Path locates the offending element, e.g. /fields/price/type.
	Path string
	// Description says what breaks in words.
	Description string
}

// String renders the issue the way Confluent renders compatibility messages.
func (i Issue) String() string {
	return fmt.Sprintf("{errorType:'%s', description:'%s', additionalInfo:'%s'}", i.Rule, i.Description, i.Path)
}

// roles names the reader and the writer in descriptions.
type roles struct{ reader, writer string }

var plainRoles = roles{reader: "reader", writer: "writer"}

// CanRead lists why data written with writer cannot be read with reader; an
// empty list means it can. Schemas of different types never match.
func CanRead(reader, writer Schema) []Issue {
	return canRead(reader, writer, plainRoles)
}

func canRead(reader, writer Schema, who roles) (issues []Issue) {
	defer func() {
		if p := recover(); p != nil {
			issues = []Issue{{Rule: "CHECK_FAILED", Path: "/", Description: fmt.Sprintf("the compatibility check failed: %v", p)}}
		}
	}()
	if reader.Type() != writer.Type() {
		return []Issue{{Rule: "SCHEMA_TYPE_CHANGED", Path: "/",
			Description: fmt.Sprintf("the %s schema is %s but the %s schema is %s", who.reader, reader.Type(), who.writer, writer.Type())}}
	}
	switch r := reader.(type) {
	case *avroSchema:
		return avroCanRead(r, writer.(*avroSchema), who)
	case *protoSchema:
		return protoCanRead(r, writer.(*protoSchema), who)
	case *jsonSchema:
		return jsonCanRead(r, writer.(*jsonSchema), who)
	case *tensorSchema:
		return tensorCanRead(r, writer.(*tensorSchema), who)
	}
	return []Issue{{Rule: "SCHEMA_TYPE_CHANGED", Path: "/", Description: "unknown schema implementation"}}
}

// Version is an earlier registered schema with its version number.
type Version struct {
	Version int
	Schema  Schema
	Text    string
}

// Check decides whether candidate may follow previous (oldest first, live
// versions only) under level. It returns Confluent-style messages: for each
// failing earlier version, its issues, then {oldSchemaVersion: N},
// {oldSchema: '...'} and {compatibility: 'LEVEL'}. Empty means compatible.
func Check(level Level, candidate Schema, previous []Version) []string {
	if level == None || len(previous) == 0 {
		return nil
	}
	against := previous
	if !level.transitive() {
		against = previous[len(previous)-1:]
	}
	var msgs []string
	// Newest first, as Confluent reports the closest conflict first.
	for i := len(against) - 1; i >= 0; i-- {
		old := against[i]
		var issues []Issue
		if level.backward() {
			issues = append(issues, canRead(candidate, old.Schema, roles{reader: "new", writer: "old"})...)
		}
		if level.forward() {
			issues = append(issues, canRead(old.Schema, candidate, roles{reader: "old", writer: "new"})...)
		}
		if len(issues) == 0 {
			continue
		}
		for _, is := range issues {
			msgs = append(msgs, is.String())
		}
		msgs = append(msgs,
			fmt.Sprintf("{oldSchemaVersion: %d}", old.Version),
			fmt.Sprintf("{oldSchema: '%s'}", old.Text),
			fmt.Sprintf("{compatibility: '%s'}", level))
	}
	return msgs
}
