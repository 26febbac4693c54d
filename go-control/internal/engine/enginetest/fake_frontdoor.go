package enginetest

import (
	"encoding/json"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// SetFrontdoor makes Status report the front door as given (its counters
// and backend pools); nil: no front door, the fake's default. The fake
// runs no front door: tests set what the engine would report.
func (f *Fake) SetFrontdoor(fd *engine.FrontdoorStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fd = clone(fd)
}

// frontdoor is a deep copy of what SetFrontdoor set (callers may keep and
// change theirs); f.mu is held.
func (f *Fake) frontdoor() *engine.FrontdoorStatus { return clone(f.fd) }

func clone(fd *engine.FrontdoorStatus) *engine.FrontdoorStatus {
	if fd == nil {
		return nil
	}
	b, err := json.Marshal(fd)
	if err != nil {
		panic(err)
	}
	var out engine.FrontdoorStatus
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return &out
}
