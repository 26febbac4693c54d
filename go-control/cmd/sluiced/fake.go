//go:build sluicefake

package main

// The in-memory engine, for the process tests only (go build -tags
// sluicefake); release builds of sluiced never contain it.
import _ "github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
