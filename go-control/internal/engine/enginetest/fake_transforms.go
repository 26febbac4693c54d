package enginetest

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Schema transforms: the fake checks the module header only.

// wasmMagic starts every WebAssembly binary; the component layer follows.
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d}

// PutTransform implements engine.Engine. The fake checks only that the
// module is a component (version 0x0d, layer 1) of a registered pair; the
// real checks are the Rust engine's (dataplane/transform).
// WithoutTransforms makes the fake an engine built without the `wasm`
// feature: every PutTransform is refused as unsupported with why.
func (f *Fake) WithoutTransforms(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.noWasm = why
}

func (f *Fake) PutTransform(subject string, from, to int, wasm []byte) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noWasm != "" {
		return 0, fmt.Errorf("%w: %s", errs.ErrUnsupported, f.noWasm)
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], wasmMagic) || wasm[6] != 1 {
		return 0, fmt.Errorf("%w: transform %s %d -> %d: not a WebAssembly component", errs.ErrInvalidArgument, subject, from, to)
	}
	reg := func(v int) bool {
		return slices.ContainsFunc(f.schemas, func(s engine.Schema) bool {
			return s.Subject == subject && s.Version == v && !s.Retired
		})
	}
	if !reg(from) || !reg(to) {
		return 0, fmt.Errorf("%w: transform %s %d -> %d: both versions must be registered schemas of the subject", errs.ErrNotFound, subject, from, to)
	}
	f.epoch++
	st := engine.TransformStatus{Subject: subject, From: from, To: to, Bytes: len(wasm),
		Digest: fmt.Sprintf("%016x", fnv1a(wasm)), LoadedUnixMs: uint64(time.Now().UnixMilli())}
	i := slices.IndexFunc(f.xforms, func(t engine.TransformStatus) bool {
		return t.Subject == subject && t.From == from && t.To == to
	})
	if i >= 0 {
		f.xforms[i] = st
	} else {
		f.xforms = append(f.xforms, st)
	}
	return f.epoch, nil
}

func fnv1a(b []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	return h
}

// RemoveTransform implements engine.Engine.
func (f *Fake) RemoveTransform(subject string, from, to int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.xforms)
	f.xforms = slices.DeleteFunc(f.xforms, func(t engine.TransformStatus) bool {
		return t.Subject == subject && t.From == from && t.To == to
	})
	if len(f.xforms) == n {
		return fmt.Errorf("%w: transform %s %d -> %d", errs.ErrNotFound, subject, from, to)
	}
	f.epoch++
	return nil
}

// Transforms implements engine.Engine.
func (f *Fake) Transforms() ([]engine.TransformStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.xforms), nil
}
