package config

import (
	"encoding/json"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// keyPaths lists every key path of a decoded document; array elements
// share their array's path.
func keyPaths(prefix string, v any, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			keyPaths(p, e, out)
		}
	case []any:
		for _, e := range x {
			keyPaths(prefix, e, out)
		}
	}
}

// The engine gets the config as JSON with the TOML key names: every key of
// the contract file must come out under the same path.
func TestEngineJSONUsesTOMLKeys(t *testing.T) {
	raw, err := os.ReadFile(contract)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	keyPaths("", doc, want)
	// Label maps hold data, not keys.
	for k := range want {
		if strings.Contains(k, "labels.") {
			delete(want, k)
		}
	}
	cfg, err := Load(contract)
	if err != nil {
		t.Fatal(err)
	}
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	keyPaths("", back, got)
	var missing []string
	for k := range want {
		if !got[k] && k != "control.admin_token" {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("keys of cfg/sluice.toml missing from the engine JSON: %v", missing)
	}
	if got["control.admin_token"] {
		t.Fatal("admin token sent to the engine")
	}
	// And the JSON decodes back to the same config.
	var again Config
	if err := json.Unmarshal(js, &again); err != nil {
		t.Fatal(err)
	}
	js2, _ := again.JSON()
	if string(js2) != string(js) {
		t.Fatalf("JSON round trip differs:\n%s\n%s", js, js2)
	}
}
