package compat

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// cmpCase is one old → new change as Confluent's backward check sees it:
// changes lists every difference compare(old, new) reports ("RULE path"),
// compatible is Confluent's answer. fwd, when set, is the forward verdict
// ("ok" or "breaking"). oldDeps and newDeps are the schemas' references.
type cmpCase struct {
	name             string
	old, new         string
	oldDeps, newDeps []Dependency
	changes          []string
	ok               bool
	fwd              string
}

// runCompare checks the backward comparison against the table, then that
// Diff's merged list and every level's verdict agree with the two
// directional comparisons.
func runCompare(t *testing.T, typ Type, cases []cmpCase) {
	t.Helper()
	for _, c := range cases {
		o, err := Parse(typ, c.old, c.oldDeps)
		if err != nil {
			t.Errorf("%s: old: %v", c.name, err)
			continue
		}
		n, err := Parse(typ, c.new, c.newDeps)
		if err != nil {
			t.Errorf("%s: new: %v", c.name, err)
			continue
		}
		back := dedupe(comparerFor(typ)(o, n, backSide))
		var got []string
		for _, f := range back {
			got = append(got, f.rule+" "+f.path)
		}
		sort.Strings(got)
		want := slices.Clone(c.changes)
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s %s: changes\n got  %q\n want %q", typ, c.name, got, want)
		}
		if allOK(back) != c.ok {
			t.Errorf("%s %s: backward compatible = %v, want %v (%q)", typ, c.name, allOK(back), c.ok, got)
		}
		fwdOK := allOK(dedupe(comparerFor(typ)(n, o, fwdSide)))
		if c.fwd != "" && fwdOK != (c.fwd == "ok") {
			t.Errorf("%s %s: forward compatible = %v, want %s", typ, c.name, fwdOK, c.fwd)
		}
		checkLevels(t, typ, c.name, o, n, c.old, c.ok, fwdOK)
	}
}

// checkLevels: every level's verdict is derived from Diff's list and agrees
// with the two directional comparisons, and each message names a breaking
// difference of the list.
func checkLevels(t *testing.T, typ Type, name string, o, n Schema, oldText string, backOK, fwdOK bool) {
	t.Helper()
	diffs := Diff(o, n)
	for _, l := range allLevels {
		wantOK := (!l.backward() || backOK) && (!l.forward() || fwdOK)
		breaks := false
		for _, d := range diffs {
			breaks = breaks || d.Breaks(l)
		}
		res := Check(l, n, []Version{{Version: 1, Schema: o, Text: oldText}})
		if res.Compatible() != wantOK || breaks == wantOK {
			t.Errorf("%s %s/%s: compatible = %v, list breaks = %v, want compatible %v (%+v)", typ, name, l, res.Compatible(), breaks, wantOK, diffs)
		}
		for _, d := range res.Differences {
			if !d.Breaks(l) && !d.Warns(l) {
				t.Errorf("%s %s/%s: result carries %+v, which neither breaks nor warns", typ, name, l, d)
			}
		}
		if !res.Compatible() {
			joined := strings.Join(res.Messages, "\n")
			if !strings.Contains(joined, "{compatibility: '"+string(l)+"'}") || !strings.Contains(joined, "{oldSchemaVersion: 1}") {
				t.Errorf("%s %s/%s: messages lack the version or level: %v", typ, name, l, res.Messages)
			}
		}
	}
}

var allLevels = []Level{None, Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive}

// JSON Schema cases, derived from Confluent's documented rules and its
// diff's behaviour on the everit model (schemas read as draft-07 unless
// they say otherwise).
func TestJSONSchemaDiff(t *testing.T) {
	obj := func(props string, extra ...string) string {
		s := `{"type":"object","properties":{` + props + `}`
		for _, e := range extra {
			s += "," + e
		}
		return s + "}"
	}
	runCompare(t, JSON, []cmpCase{
		{name: "anything to the empty schema", old: `{"properties":{}}`, new: `{}`, ok: true},
		{name: "empty to a type", old: `{}`, new: `{"type":"string"}`, changes: []string{"TYPE_CHANGED #/"}},
		{name: "false to anything", old: `false`, new: `{"type":"string"}`, ok: true},
		{name: "$id changed", old: `{"$id":"urn:a"}`, new: `{"$id":"urn:b"}`, changes: []string{"ID_CHANGED #/"}, ok: true},
		{name: "title and description changed", old: `{"title":"a","description":"x"}`, new: `{"title":"b","description":"y"}`,
			changes: []string{"TITLE_CHANGED #/", "DESCRIPTION_CHANGED #/"}, ok: true},
		{name: "type changed", old: `{"type":"object"}`, new: `{"type":"array"}`, changes: []string{"TYPE_CHANGED #/"}, fwd: "breaking"},
		{name: "integer widened to number", old: `{"type":"integer"}`, new: `{"type":"number"}`, changes: []string{"TYPE_EXTENDED #/"}, ok: true, fwd: "breaking"},
		{name: "number narrowed to integer", old: `{"type":"number"}`, new: `{"type":"integer"}`, changes: []string{"TYPE_NARROWED #/"}},
		{name: "minLength increased", old: `{"type":"string","minLength":10}`, new: `{"type":"string","minLength":11}`, changes: []string{"MIN_LENGTH_INCREASED #/minLength"}},
		{name: "minLength decreased", old: `{"type":"string","minLength":11}`, new: `{"type":"string","minLength":10}`, changes: []string{"MIN_LENGTH_DECREASED #/minLength"}, ok: true},
		{name: "maxLength added", old: `{"type":"string"}`, new: `{"type":"string","maxLength":4}`, changes: []string{"MAX_LENGTH_ADDED #/maxLength"}},
		{name: "maxLength increased", old: `{"type":"string","maxLength":10}`, new: `{"type":"string","maxLength":12}`, changes: []string{"MAX_LENGTH_INCREASED #/maxLength"}, ok: true},
		{name: "pattern removed", old: `{"type":"string","pattern":"^a"}`, new: `{"type":"string"}`, changes: []string{"PATTERN_REMOVED #/pattern"}, ok: true},
		{name: "pattern added", old: `{"type":"string"}`, new: `{"type":"string","pattern":"^a"}`, changes: []string{"PATTERN_ADDED #/pattern"}},
		{name: "pattern changed", old: `{"type":"string","pattern":"^a"}`, new: `{"type":"string","pattern":"^b"}`, changes: []string{"PATTERN_CHANGED #/pattern"}, fwd: "breaking"},
		{name: "maximum removed", old: `{"type":"number","maximum":10}`, new: `{"type":"number"}`, changes: []string{"MAXIMUM_REMOVED #/maximum"}, ok: true},
		{name: "maximum decreased", old: `{"type":"number","maximum":11}`, new: `{"type":"number","maximum":10}`, changes: []string{"MAXIMUM_DECREASED #/maximum"}},
		{name: "minimum increased", old: `{"type":"number","minimum":10}`, new: `{"type":"number","minimum":10.5}`, changes: []string{"MINIMUM_INCREASED #/minimum"}},
		{name: "exclusiveMaximum increased", old: `{"type":"number","exclusiveMaximum":5}`, new: `{"type":"number","exclusiveMaximum":6}`,
			changes: []string{"EXCLUSIVE_MAXIMUM_INCREASED #/exclusiveMaximum"}, ok: true},
		{name: "multipleOf reduced", old: `{"type":"number","multipleOf":10}`, new: `{"type":"number","multipleOf":2}`, changes: []string{"MULTIPLE_OF_REDUCED #/multipleOf"}, ok: true},
		{name: "multipleOf expanded", old: `{"type":"number","multipleOf":2}`, new: `{"type":"number","multipleOf":10}`, changes: []string{"MULTIPLE_OF_EXPANDED #/multipleOf"}},
		{name: "multipleOf changed", old: `{"type":"number","multipleOf":10}`, new: `{"type":"number","multipleOf":11}`, changes: []string{"MULTIPLE_OF_CHANGED #/multipleOf"}, fwd: "breaking"},
		{name: "multipleOf fraction reduced", old: `{"type":"number","multipleOf":0.5}`, new: `{"type":"number","multipleOf":0.25}`, changes: []string{"MULTIPLE_OF_REDUCED #/multipleOf"}, ok: true},
		{name: "not narrowed", old: `{"not":{"type":"number"}}`, new: `{"not":{"type":"integer"}}`, changes: []string{"NOT_TYPE_NARROWED #/not"}, ok: true},
		{name: "not widened from integer to number", old: `{"not":{"type":"integer"}}`, new: `{"not":{"type":"number"}}`, changes: []string{"NOT_TYPE_EXTENDED #/not"}},
		{name: "enum dropped beside a type", old: `{"type":"string","enum":["red"]}`, new: `{"type":"string"}`, changes: []string{"PRODUCT_TYPE_NARROWED #/"}, ok: true},
		{name: "enum narrowed beside a type", old: `{"type":"string","enum":["a","b","c"]}`, new: `{"type":"string","enum":["a","b"]}`,
			changes: []string{"COMBINED_TYPE_SUBSCHEMAS_CHANGED #/"}, fwd: "ok"},
		{name: "enum extended", old: `{"enum":["a","b"]}`, new: `{"enum":["a","b","c"]}`, changes: []string{"ENUM_ARRAY_EXTENDED #/enum"}, ok: true, fwd: "breaking"},
		{name: "enum extended in an allOf", old: `{"allOf":[{"type":"string"},{"enum":["red"]}]}`, new: `{"allOf":[{"enum":["red","blue"]},{"type":"string"}]}`,
			changes: []string{"ENUM_ARRAY_EXTENDED #/allOf/1/enum"}, ok: true},
		{name: "const changed", old: `{"properties":{"foo":{"const":"red"}}}`, new: `{"properties":{"foo":{"const":"blue"}}}`,
			changes: []string{"ENUM_ARRAY_CHANGED #/properties/foo/const"}, fwd: "breaking"},
		{name: "type list extended", old: `{"type":["object"]}`, new: `{"type":["object","array"]}`, changes: []string{"SUM_TYPE_EXTENDED #/"}, ok: true, fwd: "breaking"},
		{name: "type made nullable", old: `{"type":"string"}`, new: `{"type":["string","null"]}`, changes: []string{"SUM_TYPE_EXTENDED #/"}, ok: true},
		{name: "nullable type made strict", old: `{"type":["string","null"]}`, new: `{"type":"string"}`, changes: []string{"TYPE_CHANGED #/"}},
		{name: "oneOf branch changed", old: `{"oneOf":[{"type":"string"}]}`, new: `{"oneOf":[{"type":"number"}]}`, changes: []string{"COMBINED_TYPE_SUBSCHEMAS_CHANGED #/"}},
		{name: "oneOf branch added", old: `{"oneOf":[{"type":"string"}]}`, new: `{"oneOf":[{"type":"number"},{"type":"string"}]}`, changes: []string{"SUM_TYPE_EXTENDED #/"}, ok: true},
		{name: "oneOf branch removed", old: obj(`"p":{"oneOf":[{"type":"number"},{"type":"string"}]}`), new: obj(`"p":{"oneOf":[{"type":"string"}]}`),
			changes: []string{"SUM_TYPE_NARROWED #/properties/p"}},
		{name: "a type became a oneOf", old: `{"type":"string","maxLength":3}`, new: `{"oneOf":[{"type":"number"},{"type":"string"}]}`,
			changes: []string{"MAX_LENGTH_REMOVED #/maxLength", "SUM_TYPE_EXTENDED #/"}, ok: true},
		{name: "oneOf to anyOf", old: obj(`"p":{"oneOf":[{"type":"string"}]}`), new: obj(`"p":{"anyOf":[{"type":"number"},{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_EXTENDED #/properties/p", "SUM_TYPE_EXTENDED #/properties/p"}, ok: true},
		{name: "allOf to anyOf with fewer branches", old: obj(`"p":{"allOf":[{"type":"number"},{"type":"string"}]}`), new: obj(`"p":{"anyOf":[{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_EXTENDED #/properties/p", "PRODUCT_TYPE_NARROWED #/properties/p"}, ok: true},
		{name: "allOf to oneOf with fewer branches", old: obj(`"p":{"allOf":[{"type":"number"},{"type":"string"}]}`), new: obj(`"p":{"oneOf":[{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_EXTENDED #/properties/p", "PRODUCT_TYPE_NARROWED #/properties/p"}, ok: true},
		{name: "singleton anyOf to allOf", old: obj(`"p":{"anyOf":[{"type":"string"}]}`), new: obj(`"p":{"allOf":[{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_EXTENDED #/properties/p"}, ok: true},
		{name: "anyOf to oneOf with fewer branches", old: obj(`"p":{"anyOf":[{"type":"number"},{"type":"string"}]}`), new: obj(`"p":{"oneOf":[{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_CHANGED #/properties/p"}},
		{name: "oneOf to a wider allOf", old: obj(`"p":{"oneOf":[{"type":"string"}]}`), new: obj(`"p":{"allOf":[{"type":"number"},{"type":"string"}]}`),
			changes: []string{"COMBINED_TYPE_CHANGED #/properties/p"}},
		{name: "allOf constraint added", old: obj(`"p":{"allOf":[{"type":"string"}]}`), new: obj(`"p":{"allOf":[{"enum":["one"]},{"type":"string"}]}`),
			changes: []string{"PRODUCT_TYPE_EXTENDED #/properties/p"}},
		{name: "allOf branches reordered", old: obj(`"p":{"allOf":[{"enum":["one","two"]},{"type":"string"},{"maxLength":5}]}`),
			new: obj(`"p":{"allOf":[{"maxLength":5},{"enum":["one","two"]},{"type":"string"}]}`), ok: true},
		{name: "allOf duplicate dropped", old: obj(`"p":{"allOf":[{"type":"string"},{"type":"string"}]}`), new: obj(`"p":{"allOf":[{"type":"string"}]}`), ok: true},
		{name: "a type became an allOf of two", old: obj(`"p":{"type":"string"}`), new: obj(`"p":{"allOf":[{"type":"number"},{"type":"string"}]}`),
			changes: []string{"TYPE_CHANGED #/properties/p"}},
		{name: "property added to an open model", old: obj(`"foo":{"type":"string"}`), new: obj(`"foo":{"type":"string"},"bar":{"type":"number"}`),
			changes: []string{"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/bar"}, fwd: "ok"},
		{name: "property removed from an open model", old: obj(`"foo":{"type":"string"},"bar":{"type":"number"}`), new: obj(`"foo":{"type":"string"}`),
			changes: []string{"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL #/properties/bar"}, ok: true, fwd: "breaking"},
		{name: "property with an empty schema added", old: `{"additionalProperties":true}`, new: `{"additionalProperties":true,"properties":{"foo":true}}`,
			changes: []string{"PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL #/properties/foo"}, ok: true},
		{name: "optional property added to a closed model", old: obj(`"foo":{"type":"string"}`, `"additionalProperties":false`),
			new:     obj(`"foo":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":false`),
			changes: []string{"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/bar"}, ok: true, fwd: "breaking"},
		{name: "required property added to a closed model", old: obj(`"foo":{"type":"string"}`, `"additionalProperties":false`),
			new:     obj(`"foo":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":false`, `"required":["bar"]`),
			changes: []string{"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/bar"}},
		{name: "required property with default added to a closed model", old: obj(`"foo":{"type":"string"}`, `"additionalProperties":false`),
			new:     obj(`"foo":{"type":"string"},"bar":{"type":"number","default":1}`, `"additionalProperties":false`, `"required":["bar"]`),
			changes: []string{"REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/bar"}, ok: true},
		{name: "property removed from a closed model", old: obj(`"foo":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":false`),
			new: obj(`"foo":{"type":"string"}`, `"additionalProperties":false`), changes: []string{"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/bar"}, fwd: "ok"},
		{name: "false property removed from a closed model", old: `{"additionalProperties":false,"properties":{"foo":false}}`, new: `{"additionalProperties":false}`,
			changes: []string{"PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/foo"}, ok: true},
		{name: "false property added to a closed model", old: `{"additionalProperties":false}`, new: `{"additionalProperties":false,"properties":{"foo":false}}`,
			changes: []string{"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/foo"}, ok: true},
		{name: "property added within a pattern", old: obj(`"foo":{"type":"string"}`, `"additionalProperties":false`, `"patternProperties":{"^S_":{"type":"string"},"^I_":{"type":"integer"}}`),
			new:     obj(`"foo":{"type":"string"},"I_123":{"type":"number"}`, `"additionalProperties":false`, `"patternProperties":{"^S_":{"type":"string"},"^I_":{"type":"integer"}}`),
			changes: []string{"TYPE_EXTENDED #/properties/I_123", "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/I_123", "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/I_123"}, ok: true},
		{name: "property added outside additionalProperties", old: obj(`"foo":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
			new:     obj(`"foo":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":{"type":"string"}`),
			changes: []string{"TYPE_CHANGED #/properties/bar", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/bar", "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/bar"}},
		{name: "property removed into additionalProperties", old: obj(`"foo":{"type":"string"},"bar":{"type":"string"}`, `"additionalProperties":false`),
			new:     obj(`"foo":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
			changes: []string{"PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/bar", "ADDITIONAL_PROPERTIES_ADDED #/additionalProperties"}, ok: true},
		{name: "property removed, not covered", old: obj(`"foo":{"type":"string"},"bar":{"type":"number"}`, `"additionalProperties":false`),
			new:     obj(`"foo":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
			changes: []string{"TYPE_CHANGED #/properties/bar", "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/bar", "ADDITIONAL_PROPERTIES_ADDED #/additionalProperties"}},
		{name: "property type changed", old: obj(`"foo":{"type":"string"}`), new: obj(`"foo":{"type":"number"}`), changes: []string{"TYPE_CHANGED #/properties/foo"}},
		{name: "required added", old: obj(`"foo":{"type":"string"}`), new: obj(`"foo":{"type":"string"}`, `"required":["foo"]`),
			changes: []string{"REQUIRED_ATTRIBUTE_ADDED #/required/foo"}, fwd: "ok"},
		{name: "required removed", old: obj(`"foo":{"type":"string"}`, `"required":["foo"]`), new: obj(`"foo":{"type":"string"}`),
			changes: []string{"REQUIRED_ATTRIBUTE_REMOVED #/required/foo"}, ok: true, fwd: "breaking"},
		{name: "required with default added", old: obj(`"foo":{"type":"string","default":"x"}`), new: obj(`"foo":{"type":"string","default":"x"}`, `"required":["foo"]`),
			changes: []string{"REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED #/required/foo"}, ok: true},
		{name: "dependencies array swapped", old: obj(`"foo":{"type":"number"},"bar":{"type":"string"}`, `"dependencies":{"foo":["bar"]}`),
			new:     obj(`"foo":{"type":"number"},"bar":{"type":"string"}`, `"dependencies":{"bar":["foo"]}`),
			changes: []string{"DEPENDENCY_ARRAY_ADDED #/dependencies/bar", "DEPENDENCY_ARRAY_REMOVED #/dependencies/foo"}},
		{name: "dependencies array extended", old: `{"dependencies":{"a":["b"]}}`, new: `{"dependencies":{"a":["b","c"]}}`, changes: []string{"DEPENDENCY_ARRAY_EXTENDED #/dependencies/a"}},
		{name: "dependencies array narrowed", old: `{"dependencies":{"a":["b","c"]}}`, new: `{"dependencies":{"a":["b"]}}`, changes: []string{"DEPENDENCY_ARRAY_NARROWED #/dependencies/a"}, ok: true},
		{name: "dependency schema removed", old: `{"dependencies":{"foo":{"type":"string"},"bar":{"type":"string"}}}`, new: `{"dependencies":{"foo":{"type":"string"}}}`,
			changes: []string{"DEPENDENCY_SCHEMA_REMOVED #/dependencies/bar"}, ok: true},
		{name: "dependency schema changed", old: `{"dependencies":{"foo":{"type":"string"}}}`, new: `{"dependencies":{"foo":{"type":"number"}}}`,
			changes: []string{"TYPE_CHANGED #/dependencies/foo"}},
		{name: "dependentRequired in 2020-12", old: `{"$schema":"https://json-schema.org/draft/2020-12/schema","dependentRequired":{"a":["b"]}}`,
			new: `{"$schema":"https://json-schema.org/draft/2020-12/schema","dependentRequired":{"a":["b","c"]}}`, changes: []string{"DEPENDENCY_ARRAY_EXTENDED #/dependentRequired/a"}},
		{name: "maxProperties decreased", old: `{"maxProperties":2}`, new: `{"maxProperties":1}`, changes: []string{"MAX_PROPERTIES_DECREASED #/maxProperties"}},
		{name: "minProperties decreased", old: `{"minProperties":2}`, new: `{"minProperties":1}`, changes: []string{"MIN_PROPERTIES_DECREASED #/minProperties"}, ok: true},
		{name: "additionalProperties opened", old: `{"properties":{},"additionalProperties":false}`, new: `{"properties":{}}`,
			changes: []string{"ADDITIONAL_PROPERTIES_ADDED #/additionalProperties"}, ok: true},
		{name: "additionalProperties closed", old: `{"additionalProperties":true}`, new: `{"additionalProperties":false}`, changes: []string{"ADDITIONAL_PROPERTIES_REMOVED #/additionalProperties"}},
		{name: "additionalProperties narrowed", old: `{"additionalProperties":true}`, new: `{"additionalProperties":{"type":"number"}}`,
			changes: []string{"ADDITIONAL_PROPERTIES_NARROWED #/additionalProperties"}},
		{name: "additionalProperties schema changed", old: `{"additionalProperties":{"type":"string"}}`, new: `{"additionalProperties":{"type":"number"}}`,
			changes: []string{"TYPE_CHANGED #/additionalProperties"}},
		{name: "items added", old: `{"type":"array"}`, new: `{"type":"array","items":{"type":"string"}}`, changes: []string{"SCHEMA_ADDED #/items"}},
		{name: "items removed", old: `{"type":"array","items":{"type":"string"}}`, new: `{"type":"array"}`, changes: []string{"SCHEMA_REMOVED #/items"}, ok: true},
		{name: "tuple items dropped", old: `{"type":"array","items":[{"type":"string"},{"type":"number"}]}`, new: `{"type":"array"}`,
			changes: []string{"ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL #/items/0", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL #/items/1"}, ok: true},
		{name: "tuple item type changed", old: `{"type":"array","items":[{"type":"string"}]}`, new: `{"type":"array","items":[{"type":"number"}]}`,
			changes: []string{"TYPE_CHANGED #/items/0"}},
		{name: "tuple item added, covered", old: `{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"string"}}`,
			new:     `{"type":"array","items":[{"type":"string"},{"type":"string"}],"additionalItems":{"type":"string"}}`,
			changes: []string{"ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1"}, ok: true},
		{name: "tuple item added, not covered", old: `{"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"string"}}`,
			new:     `{"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":{"type":"string"}}`,
			changes: []string{"TYPE_CHANGED #/items/1", "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/items/1"}},
		{name: "tuple item added to a closed array", old: `{"type":"array","items":[{"type":"string"}],"additionalItems":false}`,
			new: `{"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":false}`, changes: []string{"ITEM_ADDED_TO_CLOSED_CONTENT_MODEL #/items/1"}, ok: true},
		{name: "tuple item removed from a closed array", old: `{"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":false}`,
			new: `{"type":"array","items":[{"type":"string"}],"additionalItems":false}`, changes: []string{"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL #/items/1"}},
		{name: "prefixItems in 2020-12", old: `{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}]}`,
			new: `{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"integer"}]}`, changes: []string{"TYPE_CHANGED #/prefixItems/0"}},
		{name: "additionalItems removed", old: `{"additionalItems":true}`, new: `{"additionalItems":false}`, changes: []string{"ADDITIONAL_ITEMS_REMOVED #/additionalItems"}},
		{name: "additionalItems schema changed", old: `{"additionalItems":{"type":"string"}}`, new: `{"additionalItems":{"type":"number"}}`, changes: []string{"TYPE_CHANGED #/additionalItems"}},
		{name: "maxItems decreased", old: `{"type":"array","maxItems":2}`, new: `{"type":"array","maxItems":1}`, changes: []string{"MAX_ITEMS_DECREASED #/maxItems"}},
		{name: "minItems removed", old: `{"type":"array","minItems":1}`, new: `{"type":"array"}`, changes: []string{"MIN_ITEMS_REMOVED #/minItems"}, ok: true},
		{name: "uniqueItems removed", old: `{"type":"array","uniqueItems":true}`, new: `{"type":"array"}`, changes: []string{"UNIQUE_ITEMS_REMOVED #/uniqueItems"}, ok: true},
		{name: "uniqueItems added", old: `{"type":"array"}`, new: `{"type":"array","uniqueItems":true}`, changes: []string{"UNIQUE_ITEMS_ADDED #/uniqueItems"}},
		{name: "minContains increased", old: `{"type":"array","contains":{"type":"string"},"minContains":1}`, new: `{"type":"array","contains":{"type":"string"},"minContains":2}`,
			changes: []string{"MIN_CONTAINS_INCREASED #/minContains"}},
		{name: "maxContains decreased", old: `{"type":"array","contains":{"type":"string"},"maxContains":3}`, new: `{"type":"array","contains":{"type":"string"},"maxContains":2}`,
			changes: []string{"MAX_CONTAINS_DECREASED #/maxContains"}},
		{name: "unevaluatedProperties closed", old: `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object"}`,
			new: `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","unevaluatedProperties":false}`, changes: []string{"UNEVALUATED_PROPERTIES_REMOVED #/unevaluatedProperties"}},
		{name: "$ref target changed", old: `{"type":"array","items":{"$ref":"#/definitions/r"},"definitions":{"r":{"type":"string"}}}`,
			new: `{"type":"array","items":{"$ref":"#/definitions/r"},"definitions":{"r":{"type":"number"}}}`, changes: []string{"TYPE_CHANGED #/items"}},
		{name: "moved into a $ref", old: `{"type":"string"}`, new: `{"$ref":"#/definitions/r","definitions":{"r":{"type":"string"}}}`, ok: true},
		{name: "recursive $ref unchanged", old: `{"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"string"}}}`,
			new: `{"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"string"}}}`, ok: true},
		{name: "recursive $ref changed", old: `{"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"string"}}}`,
			new: `{"type":"object","properties":{"next":{"$ref":"#"},"v":{"type":"integer"}}}`, changes: []string{"TYPE_CHANGED #/properties/v"}},
		{name: "default changed", old: `{"type":"string","default":"a"}`, new: `{"type":"string","default":"b"}`, changes: []string{"DEFAULT_CHANGED #/"}, ok: true},
	})
}

// A schema without $schema is draft-07, Confluent's default: array items
// as a list are a tuple, not an error.
func TestJSONSchemaDefaultDraft7(t *testing.T) {
	s, err := Parse(JSON, `{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}`, nil)
	if err != nil {
		t.Fatalf("draft-07 tuple refused: %v", err)
	}
	if m := s.(*jsonSchema).model; m.kind != jkArray || len(m.tuple) != 2 || m.permitsAddlItems {
		t.Fatalf("tuple not read as draft-07: %+v", m)
	}
	// 2020-12 still works when asked for.
	if _, err := Parse(JSON, `{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}],"items":false}`, nil); err != nil {
		t.Fatal(err)
	}
}

func TestJSONDiffHasLimit(t *testing.T) {
	// A wide anyOf of anyOfs compares every pair of branches: the memo and
	// the step budget keep it bounded.
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range 300 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"object","properties":{"k%d":{"type":"string"}}}`, i)
	}
	b.WriteString(`]}`)
	s, err := Parse(JSON, b.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(s, s); len(d) != 0 {
		t.Fatalf("a schema differs from itself: %v", d[:min(len(d), 3)])
	}
}
