package enginetest

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// The Fake describes models as engine.ModelDescriber does.
var _ engine.ModelDescriber = (*Fake)(nil)

// ModelMeta describes the fake's loaded versions of name. The fake reads
// no model files: inputs and outputs are empty.
func (f *Fake) ModelMeta(name string) (json.RawMessage, error) {
	ms, err := f.Models()
	if err != nil {
		return nil, err
	}
	type version struct {
		Version  string   `json:"version"`
		Aliases  []string `json:"aliases"`
		Kind     string   `json:"kind"`
		Platform string   `json:"platform"`
		Inputs   []any    `json:"inputs"`
		Outputs  []any    `json:"outputs"`
	}
	doc := struct {
		Name     string    `json:"name"`
		Versions []version `json:"versions"`
	}{Name: name}
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		doc.Versions = append(doc.Versions, version{Version: m.Version, Aliases: m.Aliases, Kind: m.Kind, Platform: "fake", Inputs: []any{}, Outputs: []any{}})
	}
	if len(doc.Versions) == 0 {
		return nil, fmt.Errorf("%w: no model named %q", errs.ErrNotFound, name)
	}
	return json.Marshal(doc)
}
