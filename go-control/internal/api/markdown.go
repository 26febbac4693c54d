package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The subset of OpenAPI 3.1 that openapi.json uses, for the reference page.
type oaDoc struct {
	Info struct {
		Title       string `json:"title"`
		Version     string `json:"version"`
		Description string `json:"description"`
	} `json:"info"`
	Tags []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	} `json:"tags"`
	Paths      map[string]map[string]oaOp `json:"paths"`
	Components struct {
		Schemas   map[string]*oaSchema  `json:"schemas"`
		Responses map[string]oaResponse `json:"responses"`
	} `json:"components"`
}

type oaOp struct {
	Summary     string                `json:"summary"`
	Description string                `json:"description"`
	OperationID string                `json:"operationId"`
	Tags        []string              `json:"tags"`
	Parameters  []oaParam             `json:"parameters"`
	RequestBody *oaBody               `json:"requestBody"`
	Responses   map[string]oaResponse `json:"responses"`
}

type oaParam struct {
	Name        string    `json:"name"`
	In          string    `json:"in"`
	Required    bool      `json:"required"`
	Description string    `json:"description"`
	Schema      *oaSchema `json:"schema"`
}

type oaBody struct {
	Required bool               `json:"required"`
	Content  map[string]oaMedia `json:"content"`
}

type oaMedia struct {
	Schema *oaSchema `json:"schema"`
}

type oaResponse struct {
	Ref         string             `json:"$ref"`
	Description string             `json:"description"`
	Content     map[string]oaMedia `json:"content"`
}

type oaSchema struct {
	Ref         string               `json:"$ref"`
	Type        any                  `json:"type"` // a name or a list of names
	Description string               `json:"description"`
	Enum        []any                `json:"enum"`
	Items       *oaSchema            `json:"items"`
	Properties  map[string]*oaSchema `json:"properties"`
	Required    []string             `json:"required"`
	OneOf       []*oaSchema          `json:"oneOf"`
	AnyOf       []*oaSchema          `json:"anyOf"`
	Additional  any                  `json:"additionalProperties"`
	Minimum     *float64             `json:"minimum"`
	Maximum     *float64             `json:"maximum"`
	MinLength   *int                 `json:"minLength"`
}

var methodOrder = []string{"get", "put", "post", "delete"}

// Markdown renders an OpenAPI document (openapi.json) as the reference page
// docs/api.md: operations by tag, then every schema.
func Markdown(doc []byte) ([]byte, error) {
	var d oaDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", d.Info.Title)
	b.WriteString("<!-- Generated from go-control/internal/api/openapi.json by\n     `cd go-control && go run ./internal/api/apidoc`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "Version %s. %s\n\n", d.Info.Version, d.Info.Description)
	b.WriteString("The document itself is served at `GET /openapi.json`.\n\n")
	for _, tag := range d.Tags {
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", tag.Name, tag.Description)
		for _, path := range sortedKeys(d.Paths) {
			for _, m := range methodOrder {
				op, ok := d.Paths[path][m]
				if !ok || !contains(op.Tags, tag.Name) {
					continue
				}
				writeOp(&b, strings.ToUpper(m), path, op, d.Components.Responses)
			}
		}
	}
	b.WriteString("## Schemas\n\n")
	for _, name := range sortedKeys(d.Components.Schemas) {
		writeSchema(&b, name, d.Components.Schemas[name])
	}
	return b.Bytes(), nil
}

func writeOp(b *bytes.Buffer, method, path string, op oaOp, shared map[string]oaResponse) {
	fmt.Fprintf(b, "### `%s %s`\n\n%s.", method, path, op.Summary)
	if op.Description != "" {
		fmt.Fprintf(b, " %s", op.Description)
	}
	b.WriteString("\n\n")
	if len(op.Parameters) > 0 {
		b.WriteString("| parameter | in | type | description |\n| --- | --- | --- | --- |\n")
		for _, p := range op.Parameters {
			req := ""
			if p.Required {
				req = " (required)"
			}
			fmt.Fprintf(b, "| `%s`%s | %s | %s | %s |\n", p.Name, req, p.In, typeOf(p.Schema), cell(p.Description))
		}
		b.WriteString("\n")
	}
	if op.RequestBody != nil {
		for _, ct := range sortedKeys(op.RequestBody.Content) {
			fmt.Fprintf(b, "Body (`%s`): %s.\n\n", ct, typeOf(op.RequestBody.Content[ct].Schema))
			break
		}
	}
	b.WriteString("| status | answer | body |\n| --- | --- | --- |\n")
	for _, code := range sortedKeys(op.Responses) {
		r := op.Responses[code]
		if r.Ref != "" {
			r = shared[r.Ref[strings.LastIndex(r.Ref, "/")+1:]]
		}
		desc, body := r.Description, "-"
		for _, ct := range sortedKeys(r.Content) {
			body = typeOf(r.Content[ct].Schema) + " (`" + ct + "`)"
			break
		}
		fmt.Fprintf(b, "| %s | %s | %s |\n", code, cell(desc), body)
	}
	b.WriteString("\n")
}

func writeSchema(b *bytes.Buffer, name string, s *oaSchema) {
	fmt.Fprintf(b, "### %s\n\n", name)
	if s.Description != "" {
		fmt.Fprintf(b, "%s\n\n", s.Description)
	}
	if len(s.Properties) == 0 {
		fmt.Fprintf(b, "%s\n\n", typeOf(s))
		return
	}
	b.WriteString("| field | type | description |\n| --- | --- | --- |\n")
	for _, f := range sortedKeys(s.Properties) {
		req := ""
		if contains(s.Required, f) {
			req = " (required)"
		}
		fmt.Fprintf(b, "| `%s`%s | %s | %s |\n", f, req, typeOf(s.Properties[f]), cell(s.Properties[f].Description))
	}
	if s.Additional == false {
		b.WriteString("\nOther fields are refused.\n")
	}
	b.WriteString("\n")
}

// typeOf writes a schema's type briefly: [Name](#name), array of T, enums.
func typeOf(s *oaSchema) string {
	if s == nil {
		return "-"
	}
	if s.Ref != "" {
		name := s.Ref[strings.LastIndex(s.Ref, "/")+1:]
		return "[" + name + "](#" + strings.ToLower(name) + ")"
	}
	if alts := append(s.OneOf, s.AnyOf...); len(alts) > 0 {
		var parts []string
		for _, o := range alts {
			if o.Type != "null" {
				parts = append(parts, typeOf(o))
			}
		}
		return strings.Join(parts, " or ")
	}
	var t string
	switch v := s.Type.(type) {
	case string:
		t = v
	case []any:
		var names []string
		for _, x := range v {
			if n, ok := x.(string); ok && n != "null" {
				names = append(names, n)
			}
		}
		t = strings.Join(names, "|")
	}
	switch {
	case t == "array":
		return "array of " + typeOf(s.Items)
	case len(s.Enum) > 0:
		var vals []string
		for _, e := range s.Enum {
			if e != nil {
				vals = append(vals, fmt.Sprintf("`%v`", e))
			}
		}
		return t + ": " + strings.Join(vals, ", ")
	case t == "object" && s.Additional != nil && s.Additional != false:
		if m, ok := s.Additional.(map[string]any); ok {
			if ty, ok := m["type"].(string); ok {
				return "object of " + ty
			}
		}
	}
	if t == "" {
		return "any"
	}
	return t
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
