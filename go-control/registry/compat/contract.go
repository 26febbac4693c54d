package compat

import (
	"crypto/sha256"
	"encoding/hex"
)

// Field is one element of a schema's contract: a field, property, tensor
// or message field, located by the same path its differences use.
type Field struct {
	Path string `json:"path"`
	// Name is the element's own name (the last path step for most types;
	// the field name for Protobuf, whose paths carry field numbers).
	Name string `json:"name,omitempty"`
	// Type is the element's type in the format's own words, e.g. "int",
	// "[null, string]", "record sluice.Address", "repeated int32",
	// "array<#/definitions/PILImage>", "f32[-1,4]".
	Type string `json:"type"`
	// Required: the element must be present (JSON Schema "required",
	// an Avro field without default, a proto2 required field, a tensor
	// input).
	Required bool `json:"required,omitempty"`
	// Deprecated is set when the schema marks the element deprecated (JSON Schema
	// "deprecated": true, an Avro field or named type with "deprecated":
	// true, Protobuf [deprecated = true], a tensor with "deprecated": true).
	// Removing a deprecated element is a warning, not a breaking change.
	Deprecated bool `json:"deprecated,omitempty"`
}

// FieldsMax bounds the fields a contract lists; a larger schema's list is
// cut there and marked truncated.
const FieldsMax = 10000

// Contract is the snapshot of one schema version: what it promises.
type Contract struct {
	SchemaType Type `json:"schemaType"`
	// Canonical is the schema's canonical form: Avro's Parsing Canonical
	// Form, compact JSON for JSON Schema and TENSOR, the trimmed text for
	// Protobuf.
	Canonical string `json:"canonical"`
	// Fingerprint is "sha256:" and the hex SHA-256 of Canonical (for Avro
	// the specification's SHA-256 fingerprint).
	Fingerprint     string           `json:"fingerprint"`
	Fields          []Field          `json:"fields"`
	FieldsTruncated bool             `json:"fields_truncated,omitempty"`
	Signature       *TensorSignature `json:"signature,omitempty"`
}

// NewContract takes the snapshot of s.
func NewContract(s Schema) Contract {
	canon := CanonicalForm(s)
	sum := sha256.Sum256([]byte(canon))
	c := Contract{SchemaType: s.Type(), Canonical: canon, Fingerprint: "sha256:" + hex.EncodeToString(sum[:])}
	fields := Fields(s)
	if len(fields) >= FieldsMax {
		fields, c.FieldsTruncated = fields[:FieldsMax], true
	}
	if fields == nil {
		fields = []Field{}
	}
	c.Fields = fields
	if sig, ok := Signature(s); ok {
		c.Signature = &sig
	}
	return c
}

// CanonicalForm is the canonical form the contract fingerprints.
func CanonicalForm(s Schema) string {
	if a, ok := s.(*avroSchema); ok {
		return a.pcf
	}
	return s.Canonical()
}

// Fields lists s's elements, at most FieldsMax of them (one more marks a
// cut list).
func Fields(s Schema) []Field {
	w := &fieldWalker{}
	switch t := s.(type) {
	case *avroSchema:
		avroFields(w, t)
	case *protoSchema:
		protoFields(w, t)
	case *jsonSchema:
		jsonFields(w, t)
	case *tensorSchema:
		tensorFields(w, t)
	}
	return w.out
}

// fieldWalker collects fields up to the limit.
type fieldWalker struct {
	out []Field
}

func (w *fieldWalker) full() bool { return len(w.out) > FieldsMax }

func (w *fieldWalker) add(f Field) {
	if !w.full() {
		w.out = append(w.out, f)
	}
}
