package enginetest

import (
	"fmt"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// SetLoad sets the rows Load returns for dimension by (tests of the
// heatmap's layout; the real rings are tested in the engine).
func (f *Fake) SetLoad(by engine.LoadDim, rows []engine.LoadRow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.load == nil {
		f.load = map[engine.LoadDim][]engine.LoadRow{}
	}
	f.load[by] = rows
}

// Load returns the rows set for by whose second is in from..to
// (engine.LoadSource), with the engine's range rule.
func (f *Fake) Load(from, to uint64, by engine.LoadDim) ([]engine.LoadRow, error) {
	if to < from || to-from >= engine.LoadSecondsMax {
		return nil, fmt.Errorf("%w: load range %d..%d", errs.ErrInvalidArgument, from, to)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []engine.LoadRow
	for _, r := range f.load[by] {
		if r.Second >= from && r.Second <= to {
			out = append(out, r)
		}
	}
	return out, nil
}
