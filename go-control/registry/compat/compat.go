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
	SchemaBytesMax = 1 << 20 // bytes of schema text
	// nestingDepthMax bounds the depth of nested types the comparisons
	// walk. Avro's own checker has no such limit; 4096 is far beyond any
	// real schema and keeps a hostile one from exhausting the stack.
	nestingDepthMax = 4096
	// compareStepsMax bounds the work of one directional comparison
	// (schema pairs visited); a schema pair past it is refused as
	// DIFF_LIMIT_EXCEEDED rather than compared for unbounded time.
	compareStepsMax = 1 << 20
)

// ErrInvalid wraps every parse failure.
var ErrInvalid = errors.New("invalid schema")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Parse parses text as a schema of type t for registration. deps must be
// ordered so that a dependency comes before the schemas that use it.
func Parse(t Type, text string, deps []Dependency) (Schema, error) {
	return parseGuarded(func() (Schema, error) {
		switch t {
		case Avro:
			return parseAvro(text, deps, true)
		case Protobuf:
			return parseProtobuf(text, deps)
		case JSON:
			return parseJSONSchema(text, deps)
		case Tensor:
			return parseTensor(text)
		}
		return nil, invalid("unsupported schema type %q", t)
	}, text)
}

// parseGuarded applies the size limits and turns a parser panic into a
// refused schema: the parsers are fed with client input, and a panic in
// one must not kill the control plane.
func parseGuarded(parse func() (Schema, error), text string) (s Schema, err error) {
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
	return parse()
}
