package engine

import "encoding/json"

// ModelDescriber is implemented by engines that can describe a model: every
// loaded version with its inputs and outputs (names, dtypes, shapes with
// symbolic dimensions, output placement), the platform, aliases, adapters
// and the model file's own metadata. The answer is the engine's JSON
// document (see docs/operations.md, "Model metadata"), passed through.
// A name with no loaded version is errs.ErrNotFound.
type ModelDescriber interface {
	ModelMeta(name string) (json.RawMessage, error)
}
