package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func registerSchema(t *testing.T, addr, subject, schemaType, file string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "examples", "diffusion", file))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"schemaType": schemaType, "schema": string(text)})
	resp, err := http.Post("http://"+addr+"/registry/subjects/"+subject+"/versions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("register %s: %d", file, resp.StatusCode)
	}
}

// The seed's example through the CLI: the per-field verdict table.
func TestSchemasDiffCommand(t *testing.T) {
	addr, _ := startDaemon(t, "")
	env := map[string]string{"SLUICE_ADDR": addr}
	registerSchema(t, addr, "sd-out", "JSON", "output-v1-deprecated.json")
	registerSchema(t, addr, "sd-out", "JSON", "output-v2.json")

	out := mustCtl(t, env, "schemas", "diff", "sd-out", "1", "2")
	// Columns are padded to the widest cell: compare lines word by word.
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{
		"sd-out: version 1 -> 2 (JSON): compatible under BACKWARD",
		"PATH RULE BACKWARD FORWARD",
		"#/properties/images/items SUM_TYPE_EXTENDED / TYPE_CHANGED compatible breaking",
		"#/properties/latents PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL / REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL warning warning",
		"#/properties/images/items (forward breaking): the type at '#/properties/images/items' is different in the old schema",
		"#/properties/latents (backward warning):",
		"#/properties/latents (forward warning):",
	} {
		if !strings.Contains(got, want) {
			t.Fatalf("schemas diff output lacks %q:\n%s", want, out)
		}
	}
	var doc struct {
		Differences []struct{ Path, Backward string }
	}
	if err := json.Unmarshal([]byte(mustCtl(t, env, "-json", "schemas", "diff", "sd-out", "1", "latest")), &doc); err != nil || len(doc.Differences) != 2 {
		t.Fatalf("schemas diff -json: %v %+v", err, doc)
	}

	out = mustCtl(t, env, "schemas", "contract", "sd-out", "1")
	if !strings.Contains(out, "sd-out version 1: schema id 1 (JSON), sha256:") ||
		!strings.Contains(out, "#/properties/latents") || !strings.Contains(out, "required,deprecated") {
		t.Fatalf("schemas contract output:\n%s", out)
	}

	if code, _, errs := ctl(t, env, "schemas", "diff", "sd-out", "1", "9"); code != 1 || !strings.Contains(errs, "version_not_found") {
		t.Fatalf("diff against a missing version: exit %d, %s", code, errs)
	}
	if code, _, _ := ctl(t, env, "schemas", "diff", "sd-out", "1"); code != 2 {
		t.Fatalf("schemas diff with two arguments: exit %d, want usage (2)", code)
	}
}
