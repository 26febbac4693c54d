package registry

import (
	"strings"
	"testing"
)

// Protobuf imports through references, as Confluent's registry takes them:
// the import path is the reference's name, the imported types keep their
// package, and compatibility is judged through them.
func TestRESTProtobufReferences(t *testing.T) {
	c, _ := newClient(t)
	reg := func(schema string, refs []map[string]any) map[string]any {
		return map[string]any{"schemaType": "PROTOBUF", "schema": schema, "references": refs}
	}
	ref := func(name, subject string, version int) []map[string]any {
		return []map[string]any{{"name": name, "subject": subject, "version": version}}
	}
	money := func(cents string) string {
		return "syntax = \"proto3\";\npackage common;\nmessage Money { " + cents + " cents = 1; }\n"
	}
	order := "syntax = \"proto3\";\npackage shop;\nimport \"common/money.proto\";\nmessage Order { common.Money price = 1; }\n"
	c.expect("POST", "/subjects/money/versions", reg(money("int64"), nil), 200, map[string]int{"id": 1})

	// An import needs a reference of its very name (422, 42201).
	c.expectErr("POST", "/subjects/order/versions", reg(order, nil), 422, CodeInvalidSchema)
	got := c.expectErr("POST", "/subjects/order/versions", reg(order, ref("money.proto", "money", 1)), 422, CodeInvalidSchema)
	if !strings.Contains(got["message"].(string), "common/money.proto") {
		t.Fatalf("422 does not name the import: %v", got)
	}
	c.expect("POST", "/subjects/order/versions", reg(order, ref("common/money.proto", "money", 1)), 200, map[string]int{"id": 2})

	// The well-known types need none.
	wkt := "syntax = \"proto3\";\nimport \"google/protobuf/timestamp.proto\";\nmessage Event { google.protobuf.Timestamp at = 1; }\n"
	c.expect("POST", "/subjects/event/versions", reg(wkt, nil), 200, map[string]int{"id": 3})

	// A reference's own references come along: address imports money,
	// customer imports address only.
	address := "syntax = \"proto3\";\npackage common;\nimport \"common/money.proto\";\nmessage Address { string city = 1; Money credit = 2; }\n"
	c.expect("POST", "/subjects/address/versions", reg(address, ref("common/money.proto", "money", 1)), 200, map[string]int{"id": 4})
	customer := "syntax = \"proto3\";\nimport \"common/address.proto\";\nmessage Customer { common.Address home = 1; }\n"
	c.expect("POST", "/subjects/customer/versions", reg(customer, ref("common/address.proto", "address", 1)), 200, map[string]int{"id": 5})

	// Compatibility follows the referenced type: money v2 changes cents'
	// wire type (allowed under NONE for money itself); order moving to it
	// is breaking, and the 409 says where.
	c.expect("PUT", "/config/money", map[string]string{"compatibility": "NONE"}, 200, nil)
	c.expect("POST", "/subjects/money/versions", reg(money("string"), nil), 200, map[string]int{"id": 6})
	c.expect("POST", "/compatibility/subjects/order/versions/latest", reg(order, ref("common/money.proto", "money", 2)), 200,
		map[string]bool{"is_compatible": false})
	got = c.expectErr("POST", "/subjects/order/versions", reg(order, ref("common/money.proto", "money", 2)), 409, CodeIncompatibleSchema)
	if msg := got["message"].(string); !strings.Contains(msg, "FIELD_SCALAR_KIND_CHANGED") || !strings.Contains(msg, "#/Money/1") {
		t.Fatalf("409 through a reference: %v", got)
	}
	// A compatible change on the same reference passes.
	order2 := strings.Replace(order, "price = 1;", "price = 1; string note = 2;", 1)
	c.expect("POST", "/compatibility/subjects/order/versions/latest", reg(order2, ref("common/money.proto", "money", 1)), 200,
		map[string]bool{"is_compatible": true})
	c.expect("POST", "/subjects/order/versions", reg(order2, ref("common/money.proto", "money", 1)), 200, map[string]int{"id": 7})
}

// The oneof rules reach the REST API: a renamed oneof is fine, a member
// dropped while it is renamed is not.
func TestRESTProtobufOneofs(t *testing.T) {
	c, _ := newClient(t)
	body := func(schema string) map[string]any { return map[string]any{"schemaType": "PROTOBUF", "schema": schema} }
	v1 := "syntax = \"proto3\";\nmessage Pay { oneof method { string card = 1; string iban = 2; } }\n"
	c.expect("POST", "/subjects/pay/versions", body(v1), 200, map[string]int{"id": 1})
	got := c.expectErr("POST", "/subjects/pay/versions", body(strings.Replace(strings.Replace(v1, "method", "how", 1), " string iban = 2;", "", 1)), 409, CodeIncompatibleSchema)
	if msg := got["message"].(string); !strings.Contains(msg, "ONEOF_FIELD_REMOVED") {
		t.Fatalf("409: %v", got)
	}
	c.expect("POST", "/subjects/pay/versions", body(strings.Replace(v1, "method", "how", 1)), 200, map[string]int{"id": 2})
}
