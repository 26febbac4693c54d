package registry

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

type client struct {
	t   *testing.T
	srv *httptest.Server
}

func newClient(t *testing.T) (*client, *Registry) {
	t.Helper()
	reg, err := Open(context.Background(), NewMemoryStore(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(reg))
	t.Cleanup(func() { srv.Close(); reg.Close() })
	return &client{t: t, srv: srv}, reg
}

// do sends a request and returns the status, the raw body and the body
// decoded as JSON (nil when it is not JSON).
func (c *client) do(method, path string, body any) (int, string, any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Accept", ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		c.t.Errorf("%s %s: content type %q", method, path, ct)
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		v = nil
	}
	return resp.StatusCode, string(raw), v
}

// expect checks status and, when want is non-nil, the decoded JSON body.
func (c *client) expect(method, path string, body any, status int, want any) any {
	c.t.Helper()
	st, raw, got := c.do(method, path, body)
	if st != status {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, st, status, raw)
	}
	if want != nil {
		wb, _ := json.Marshal(want)
		var w any
		json.Unmarshal(wb, &w)
		if !reflect.DeepEqual(got, w) {
			c.t.Fatalf("%s %s: body %s, want %s", method, path, raw, wb)
		}
	}
	return got
}

// expectErr checks a Confluent error body.
func (c *client) expectErr(method, path string, body any, status, code int) map[string]any {
	c.t.Helper()
	got, ok := c.expect(method, path, body, status, nil).(map[string]any)
	if !ok || got["error_code"] != float64(code) || got["message"] == "" {
		c.t.Fatalf("%s %s: want error_code %d, got %v", method, path, code, got)
	}
	return got
}

const (
	avroV1 = `{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"}]}`
	avroV2 = `{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"},{"name":"tag","type":"string","default":""}]}`
	avroV3 = `{"type":"record","name":"Req","namespace":"sluice","fields":[{"name":"id","type":"int"},{"name":"tag","type":"string","default":""},{"name":"must","type":"long"}]}`
)

func TestRESTRegisterAndRead(t *testing.T) {
	c, _ := newClient(t)
	c.expect("GET", "/subjects", nil, 200, []string{})
	c.expect("GET", "/schemas/types", nil, 200, []string{"AVRO", "PROTOBUF", "JSON", "TENSOR"})

	c.expect("POST", "/subjects/req-value/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	// Same text again: same id, no new version.
	c.expect("POST", "/subjects/req-value/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	// Same schema, other whitespace, other subject: same global id.
	spaced := strings.ReplaceAll(avroV1, ",", ", ")
	c.expect("POST", "/subjects/other-value/versions", map[string]any{"schema": spaced, "schemaType": "AVRO"}, 200, map[string]int{"id": 1})
	c.expect("POST", "/subjects/req-value/versions", map[string]any{"schema": avroV2}, 200, map[string]int{"id": 2})

	c.expect("GET", "/subjects", nil, 200, []string{"other-value", "req-value"})
	c.expect("GET", "/subjects?subjectPrefix=req", nil, 200, []string{"req-value"})
	c.expect("GET", "/subjects/req-value/versions", nil, 200, []int{1, 2})
	c.expect("GET", "/subjects/req-value/versions/1", nil, 200,
		map[string]any{"subject": "req-value", "version": 1, "id": 1, "schema": avroV1})
	c.expect("GET", "/subjects/req-value/versions/latest", nil, 200,
		map[string]any{"subject": "req-value", "version": 2, "id": 2, "schema": avroV2})
	c.expect("GET", "/subjects/req-value/versions/-1", nil, 200,
		map[string]any{"subject": "req-value", "version": 2, "id": 2, "schema": avroV2})
	if st, raw, _ := c.do("GET", "/subjects/req-value/versions/2/schema", nil); st != 200 || raw != avroV2 {
		t.Fatalf("raw schema: %d %s", st, raw)
	}
	c.expect("GET", "/schemas/ids/2", nil, 200, map[string]any{"schema": avroV2})
	if st, raw, _ := c.do("GET", "/schemas/ids/1/schema", nil); st != 200 || raw != avroV1 {
		t.Fatalf("raw schema by id: %d %s", st, raw)
	}
	c.expect("GET", "/schemas/ids/1/versions", nil, 200,
		[]map[string]any{{"subject": "other-value", "version": 1}, {"subject": "req-value", "version": 1}})
	c.expect("GET", "/schemas/ids/1/subjects", nil, 200, []string{"other-value", "req-value"})

	// Lookup.
	c.expect("POST", "/subjects/req-value", map[string]any{"schema": avroV1}, 200,
		map[string]any{"subject": "req-value", "version": 1, "id": 1, "schema": avroV1})
	c.expectErr("POST", "/subjects/req-value", map[string]any{"schema": avroV3}, 404, CodeSchemaNotFound)
	c.expectErr("POST", "/subjects/nope", map[string]any{"schema": avroV1}, 404, CodeSubjectNotFound)

	// Errors.
	c.expectErr("GET", "/subjects/nope/versions", nil, 404, CodeSubjectNotFound)
	c.expectErr("GET", "/subjects/req-value/versions/9", nil, 404, CodeVersionNotFound)
	c.expectErr("GET", "/subjects/req-value/versions/0", nil, 422, CodeInvalidVersion)
	c.expectErr("GET", "/subjects/req-value/versions/abc", nil, 422, CodeInvalidVersion)
	c.expectErr("GET", "/schemas/ids/99", nil, 404, CodeSchemaNotFound)
	c.expectErr("GET", "/schemas/ids/x/schema", nil, 404, CodeSchemaNotFound)
	c.expectErr("POST", "/subjects/req-value/versions", map[string]any{"schema": `{"type":"recor"}`}, 422, CodeInvalidSchema)
	c.expectErr("POST", "/subjects/req-value/versions", map[string]any{"schema": avroV1, "schemaType": "XML"}, 422, CodeInvalidSchema)
	c.expectErr("POST", "/subjects/req-value/versions", map[string]any{"schema": ""}, 422, CodeInvalidSchema)
	if st, _, _ := c.do("POST", "/subjects/req-value/versions", "not an object"); st != 400 {
		t.Fatalf("garbage body: status %d", st)
	}
	c.expectErr("GET", "/no/such/route", nil, 404, 404)
	c.expectErr("PATCH", "/subjects", nil, 405, 405)

	// Subject names with URL-escaped characters round-trip.
	c.expect("POST", "/subjects/team%2Fa%20b/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	c.expect("GET", "/subjects/team%2Fa%20b/versions/1", nil, 200,
		map[string]any{"subject": "team/a b", "version": 1, "id": 1, "schema": avroV1})
}

func TestRESTIncompatibleAndCompatibilityEndpoint(t *testing.T) {
	c, _ := newClient(t)
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV2}, 200, map[string]int{"id": 2})

	got := c.expectErr("POST", "/subjects/s/versions", map[string]any{"schema": avroV3}, 409, CodeIncompatibleSchema)
	msgs, _ := got["messages"].([]any)
	joined := ""
	for _, m := range msgs {
		joined += m.(string) + "\n"
	}
	if !strings.Contains(joined, "READER_FIELD_MISSING_DEFAULT_VALUE") || !strings.Contains(joined, "/fields/must") ||
		!strings.Contains(got["message"].(string), "incompatible with an earlier schema") {
		t.Fatalf("409 body does not name the breaking field: %v", got)
	}
	// The 409 carries the differences its messages come from.
	diffs, _ := got["differences"].([]any)
	if len(diffs) != 1 {
		t.Fatalf("409 differences: %v", got["differences"])
	}
	d := diffs[0].(map[string]any)
	if d["rule"] != "READER_FIELD_MISSING_DEFAULT_VALUE" || d["path"] != "/fields/must" || d["backward"] != "breaking" ||
		d["forward"] != "compatible" || d["version"] != float64(2) {
		t.Fatalf("409 difference: %v", d)
	}

	c.expect("POST", "/compatibility/subjects/s/versions/latest", map[string]any{"schema": avroV3}, 200,
		map[string]any{"is_compatible": false})
	v := c.expect("POST", "/compatibility/subjects/s/versions/latest?verbose=true", map[string]any{"schema": avroV3}, 200, nil).(map[string]any)
	if v["is_compatible"] != false || len(v["messages"].([]any)) == 0 {
		t.Fatalf("verbose compat: %v", v)
	}
	c.expect("POST", "/compatibility/subjects/s/versions/1?verbose=true", map[string]any{"schema": avroV2}, 200,
		map[string]any{"is_compatible": true, "messages": []string{}, "differences": []any{}})
	c.expect("POST", "/compatibility/subjects/s/versions", map[string]any{"schema": avroV2}, 200, map[string]any{"is_compatible": true})
	c.expectErr("POST", "/compatibility/subjects/s/versions/7", map[string]any{"schema": avroV2}, 404, CodeVersionNotFound)
	c.expectErr("POST", "/compatibility/subjects/nope/versions/latest", map[string]any{"schema": avroV2}, 404, CodeSubjectNotFound)
	c.expectErr("POST", "/compatibility/subjects/s/versions/latest", map[string]any{"schema": "{"}, 422, CodeInvalidSchema)

	// With NONE on the subject the same schema registers.
	c.expect("PUT", "/config/s", map[string]string{"compatibility": "NONE"}, 200, map[string]string{"compatibility": "NONE"})
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV3}, 200, map[string]int{"id": 3})
}

func TestRESTConfig(t *testing.T) {
	c, _ := newClient(t)
	c.expect("GET", "/config", nil, 200, map[string]string{"compatibilityLevel": "BACKWARD"})
	c.expect("PUT", "/config", map[string]string{"compatibility": "full_transitive"}, 200, map[string]string{"compatibility": "FULL_TRANSITIVE"})
	c.expect("GET", "/config", nil, 200, map[string]string{"compatibilityLevel": "FULL_TRANSITIVE"})
	c.expectErr("PUT", "/config", map[string]string{"compatibility": "SIDEWAYS"}, 422, CodeInvalidCompatibilityLevel)

	c.expectErr("GET", "/config/s", nil, 404, CodeSubjectCompatibilityNotConfigd)
	c.expect("GET", "/config/s?defaultToGlobal=true", nil, 200, map[string]string{"compatibilityLevel": "FULL_TRANSITIVE"})
	c.expect("PUT", "/config/s", map[string]string{"compatibility": "FORWARD"}, 200, map[string]string{"compatibility": "FORWARD"})
	c.expect("GET", "/config/s", nil, 200, map[string]string{"compatibilityLevel": "FORWARD"})
	c.expect("DELETE", "/config/s", nil, 200, map[string]string{"compatibilityLevel": "FORWARD"})
	c.expectErr("DELETE", "/config/s", nil, 404, CodeSubjectCompatibilityNotConfigd)
	c.expect("DELETE", "/config", nil, 200, map[string]string{"compatibilityLevel": "FULL_TRANSITIVE"})
	c.expect("GET", "/config", nil, 200, map[string]string{"compatibilityLevel": "BACKWARD"})
	c.expect("GET", "/mode", nil, 200, map[string]string{"mode": "READWRITE"})
	// Config alone does not make a subject.
	c.expect("PUT", "/config/ghost", map[string]string{"compatibility": "NONE"}, 200, nil)
	c.expect("GET", "/subjects", nil, 200, []string{})
}

func TestRESTDeletes(t *testing.T) {
	c, _ := newClient(t)
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV2}, 200, map[string]int{"id": 2})

	// Version: soft, then hard; hard first is refused.
	c.expectErr("DELETE", "/subjects/s/versions/2?permanent=true", nil, 404, CodeVersionNotSoftDeleted)
	c.expect("DELETE", "/subjects/s/versions/2", nil, 200, 2)
	c.expectErr("DELETE", "/subjects/s/versions/2", nil, 404, CodeVersionSoftDeleted)
	c.expectErr("GET", "/subjects/s/versions/2", nil, 404, CodeVersionNotFound)
	c.expect("GET", "/subjects/s/versions/2?deleted=true", nil, 200,
		map[string]any{"subject": "s", "version": 2, "id": 2, "schema": avroV2})
	c.expect("GET", "/subjects/s/versions", nil, 200, []int{1})
	c.expect("GET", "/subjects/s/versions?deleted=true", nil, 200, []int{1, 2})
	c.expect("GET", "/subjects/s/versions/latest", nil, 200, map[string]any{"subject": "s", "version": 1, "id": 1, "schema": avroV1})
	c.expect("DELETE", "/subjects/s/versions/2?permanent=true", nil, 200, 2)
	c.expectErr("GET", "/subjects/s/versions/2?deleted=true", nil, 404, CodeVersionNotFound)
	c.expectErr("GET", "/schemas/ids/2", nil, 404, CodeSchemaNotFound)

	// A new registration gets a new id: ids are never reused.
	c.expect("POST", "/subjects/s/versions", map[string]any{"schema": avroV2}, 200, map[string]int{"id": 3})
	c.expect("GET", "/subjects/s/versions", nil, 200, []int{1, 2})

	// Subject: soft, then hard.
	c.expectErr("DELETE", "/subjects/s?permanent=true", nil, 404, CodeSubjectNotSoftDeleted)
	c.expect("DELETE", "/subjects/s", nil, 200, []int{1, 2})
	c.expectErr("DELETE", "/subjects/s", nil, 404, CodeSubjectSoftDeleted)
	c.expect("GET", "/subjects", nil, 200, []string{})
	c.expect("GET", "/subjects?deleted=true", nil, 200, []string{"s"})
	c.expectErr("GET", "/subjects/s/versions", nil, 404, CodeSubjectNotFound)
	c.expect("POST", "/subjects/s?deleted=true", map[string]any{"schema": avroV1}, 200,
		map[string]any{"subject": "s", "version": 1, "id": 1, "schema": avroV1})
	c.expect("DELETE", "/subjects/s?permanent=true", nil, 200, []int{1, 2})
	c.expectErr("DELETE", "/subjects/s", nil, 404, CodeSubjectNotFound)
	c.expect("GET", "/subjects?deleted=true", nil, 200, []string{})
	c.expectErr("GET", "/schemas/ids/1", nil, 404, CodeSchemaNotFound)
}

func TestRESTReferences(t *testing.T) {
	c, _ := newClient(t)
	money := "syntax = \"proto3\";\npackage common;\nmessage Money { int64 cents = 1; }\n"
	order := "syntax = \"proto3\";\npackage shop;\nimport \"common/money.proto\";\nmessage Order { common.Money price = 1; }\n"
	c.expect("POST", "/subjects/money/versions", map[string]any{"schema": money, "schemaType": "PROTOBUF"}, 200, map[string]int{"id": 1})
	refs := []map[string]any{{"name": "common/money.proto", "subject": "money", "version": 1}}
	c.expectErr("POST", "/subjects/order/versions", map[string]any{"schema": order, "schemaType": "PROTOBUF"}, 422, CodeInvalidSchema)
	c.expectErr("POST", "/subjects/order/versions", map[string]any{"schema": order, "schemaType": "PROTOBUF",
		"references": []map[string]any{{"name": "common/money.proto", "subject": "money", "version": 5}}}, 422, CodeInvalidSchema)
	c.expect("POST", "/subjects/order/versions", map[string]any{"schema": order, "schemaType": "PROTOBUF", "references": refs}, 200, map[string]int{"id": 2})
	c.expect("GET", "/subjects/order/versions/1", nil, 200, map[string]any{"subject": "order", "version": 1, "id": 2,
		"schemaType": "PROTOBUF", "schema": order, "references": refs})
	c.expect("GET", "/schemas/ids/2", nil, 200, map[string]any{"schemaType": "PROTOBUF", "schema": order, "references": refs})
	c.expect("GET", "/subjects/money/versions/1/referencedby", nil, 200, []int{2})

	// A referenced version cannot be deleted.
	c.expectErr("DELETE", "/subjects/money/versions/1", nil, 422, CodeReferenceExists)
	c.expectErr("DELETE", "/subjects/money", nil, 422, CodeReferenceExists)
	// Once the referrer is gone (soft), soft delete is allowed but a hard
	// delete still waits for the referrer's hard delete.
	c.expect("DELETE", "/subjects/order", nil, 200, []int{1})
	c.expect("DELETE", "/subjects/money", nil, 200, []int{1})
	c.expectErr("DELETE", "/subjects/money?permanent=true", nil, 422, CodeReferenceExists)
	c.expect("DELETE", "/subjects/order?permanent=true", nil, 200, []int{1})
	c.expect("DELETE", "/subjects/money?permanent=true", nil, 200, []int{1})

	// JSON Schema and TENSOR through the same API.
	c.expect("POST", "/subjects/j/versions", map[string]any{"schemaType": "JSON", "schema": `{"type":"object"}`}, 200, map[string]int{"id": 3})
	sig := `{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}],"outputs":[{"name":"y","dtype":"f32","shape":[-1,3]}]}`
	c.expect("POST", "/subjects/mlp/versions", map[string]any{"schemaType": "TENSOR", "schema": sig}, 200, map[string]int{"id": 4})
	got := c.expectErr("POST", "/subjects/mlp/versions", map[string]any{"schemaType": "TENSOR",
		"schema": strings.Replace(sig, `"f32","shape":[-1,4]`, `"f16","shape":[-1,4]`, 1)}, 409, CodeIncompatibleSchema)
	if !strings.Contains(got["message"].(string), "TENSOR_DTYPE_CHANGED") {
		t.Fatalf("tensor 409: %v", got)
	}
	c.expectErr("POST", "/subjects/mlp/versions", map[string]any{"schemaType": "AVRO", "schema": avroV1}, 409, CodeIncompatibleSchema)
}

// The daemon mounts the handler under a prefix.
func TestRESTUnderPrefix(t *testing.T) {
	reg, err := Open(context.Background(), NewMemoryStore(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/registry", NewHandler(reg)))
	t.Cleanup(func() { srv.Close(); reg.Close() })
	c := &client{t: t, srv: srv}
	c.expect("GET", "/registry", nil, 200, map[string]any{})
	c.expect("POST", "/registry/subjects/a%2Fb/versions", map[string]any{"schema": avroV1}, 200, map[string]int{"id": 1})
	c.expect("GET", "/registry/subjects", nil, 200, []string{"a/b"})
	c.expect("GET", "/registry/subjects/a%2Fb/versions/latest", nil, 200,
		map[string]any{"subject": "a/b", "version": 1, "id": 1, "schema": avroV1})
	c.expectErr("GET", "/registry/nothing", nil, 404, 404)
}
