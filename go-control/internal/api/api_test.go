package api

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// docs/api.md is generated from openapi.json and must be current.
func TestReferencePageIsCurrent(t *testing.T) {
	want, err := Markdown(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/api.md is stale: run `cd go-control && go run ./internal/api/apidoc`")
	}
}

// Every $ref points at a schema that exists, and every schema is used.
func TestDocumentRefsResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	used := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if r, ok := x["$ref"].(string); ok {
				const p = "#/components/schemas/"
				if len(r) > len(p) && r[:len(p)] == p {
					name := r[len(p):]
					if schemas[name] == nil {
						t.Errorf("$ref %s: no such schema", r)
					}
					used[name] = true
				}
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(doc)
	for name := range schemas {
		if !used[name] {
			t.Errorf("schema %s is never used", name)
		}
	}
}
