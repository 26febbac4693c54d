package registry

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func example(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "diffusion", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The seed's example over REST (docs/schemas.md): v2 of a diffusion
// pipeline's output contract drops latents and widens images. Refused
// under BACKWARD while v1 does not deprecate latents; with latents marked
// deprecated the removal warns and v2 registers. The contract and the
// per-field diff are served.
func TestRESTDiffusionContract(t *testing.T) {
	c, _ := newClient(t)
	json := func(s string) map[string]any { return map[string]any{"schemaType": "JSON", "schema": s} }
	c.expect("POST", "/subjects/sd-out/versions", json(example(t, "output-v1.json")), 200, map[string]int{"id": 1})
	got := c.expectErr("POST", "/subjects/sd-out/versions", json(example(t, "output-v2.json")), 409, CodeIncompatibleSchema)
	diffs, _ := got["differences"].([]any)
	if len(diffs) != 1 || diffs[0].(map[string]any)["path"] != "#/properties/latents" ||
		diffs[0].(map[string]any)["rule"] != "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL" {
		t.Fatalf("409 differences: %v", got)
	}

	c.expect("POST", "/subjects/sd-out-2/versions", json(example(t, "output-v1-deprecated.json")), 200, map[string]int{"id": 2})
	c.expect("POST", "/subjects/sd-out-2/versions", json(example(t, "output-v2.json")), 200, map[string]int{"id": 3})

	doc := c.expect("GET", "/subjects/sd-out-2/diff?from=1&to=2", nil, 200, nil).(map[string]any)
	if doc["compatible"] != true || doc["compatibility"] != "BACKWARD" || doc["from"] != float64(1) || doc["to"] != float64(2) || doc["schemaType"] != "JSON" {
		t.Fatalf("diff: %v", doc)
	}
	verdicts := map[string]string{}
	for _, x := range doc["differences"].([]any) {
		d := x.(map[string]any)
		verdicts[d["path"].(string)] = d["rule"].(string) + " " + d["backward"].(string) + " " + d["forward"].(string)
	}
	if verdicts["#/properties/images/items"] != "SUM_TYPE_EXTENDED compatible breaking" ||
		verdicts["#/properties/latents"] != "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL warning warning" {
		t.Fatalf("diff verdicts: %v", verdicts)
	}
	// Defaults: to = latest, from = the version before it.
	if d := c.expect("GET", "/subjects/sd-out-2/diff", nil, 200, nil).(map[string]any); d["from"] != float64(1) || d["to"] != float64(2) {
		t.Fatalf("default diff: %v", d)
	}

	ct := c.expect("GET", "/subjects/sd-out-2/versions/1/contract", nil, 200, nil).(map[string]any)
	if ct["id"] != float64(2) || ct["version"] != float64(1) || !strings.HasPrefix(ct["fingerprint"].(string), "sha256:") ||
		!strings.Contains(ct["canonical"].(string), `"latents"`) {
		t.Fatalf("contract: %v", ct)
	}
	found := false
	for _, x := range ct["fields"].([]any) {
		f := x.(map[string]any)
		if f["path"] == "#/properties/latents" {
			found = f["deprecated"] == true && f["required"] == true && f["type"] == "array<number>"
		}
	}
	if !found {
		t.Fatalf("contract fields lack deprecated latents: %v", ct["fields"])
	}

	c.expectErr("GET", "/subjects/sd-out-2/diff?from=1&to=9", nil, 404, CodeVersionNotFound)
	c.expectErr("GET", "/subjects/sd-out-2/diff?from=x", nil, 422, CodeInvalidVersion)
	c.expectErr("GET", "/subjects/sd-out/diff", nil, 404, CodeVersionNotFound) // one version: nothing before it
	c.expectErr("GET", "/subjects/nope/versions/1/contract", nil, 404, CodeSubjectNotFound)
	c.expectErr("GET", "/subjects/sd-out-2/versions/7/contract", nil, 404, CodeVersionNotFound)
}

// The snapshot is stored with the schema (contracts/<id>) in the same
// write, read back after a reopen, and dropped with the schema.
func TestContractStoredAndReloaded(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	store, err := OpenBoltStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sig := `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`
	mustRegister(t, reg, "mlp", SchemaInput{Type: "TENSOR", Schema: sig}, 1, 1)
	_, before, err := reg.Contract("mlp", 1, false)
	if err != nil || before.Signature == nil {
		t.Fatalf("contract: %+v %v", before, err)
	}
	reg.Close()

	store, err = OpenBoltStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, contractKey(1)); err != nil {
		t.Fatalf("no stored snapshot: %v", err)
	}
	reg, err = Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	_, after, err := reg.Contract("mlp", 1, false)
	if err != nil || after.Fingerprint != before.Fingerprint || after.Canonical != before.Canonical || len(after.Fields) != 2 ||
		after.Signature == nil || after.Signature.Outputs[0].Name != "y" {
		t.Fatalf("reloaded contract %+v, before %+v (%v)", after, before, err)
	}
	if reg.schemas[1].contractRev == 0 {
		t.Fatal("reloaded contract not marked stored")
	}
	if _, err := reg.DeleteSubject(ctx, "mlp", false); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.DeleteSubject(ctx, "mlp", true); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, contractKey(1)); err == nil {
		t.Fatal("snapshot left behind by a hard delete")
	}
}

// A snapshot too large for the store keeps its fingerprint and a cut field
// list; the canonical form is recomputed on load.
func TestLargeContractIsCut(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := range 9000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"field_with_a_long_name_` + strings.Repeat("x", 20) + strconv.Itoa(i) + `":{"type":"string","maxLength":10}`)
	}
	b.WriteString(`}}`)
	ctx := context.Background()
	store := NewMemoryStore()
	reg, err := Open(ctx, store, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustRegister(t, reg, "wide", SchemaInput{Type: "JSON", Schema: b.String()}, 1, 1)
	e, err := store.Get(ctx, contractKey(1))
	if err != nil || len(e.Value) > ContractBytesMax {
		t.Fatalf("stored snapshot %d bytes (%v)", len(e.Value), err)
	}
	if err := reg.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	_, c, err := reg.Contract("wide", 1, false)
	if err != nil || c.Canonical == "" || !c.FieldsTruncated || len(c.Fields) == 0 {
		t.Fatalf("cut contract: canonical %d bytes, truncated %v, %d fields (%v)", len(c.Canonical), c.FieldsTruncated, len(c.Fields), err)
	}
	reg.Close()
}
