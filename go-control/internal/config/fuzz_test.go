package config

import (
	"os"
	"testing"
)

// FuzzParse: any input gives a config or an error, never a panic.
// Run longer with: go test -fuzz=FuzzParse -fuzztime=60s ./internal/config
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(contract); err == nil {
		f.Add(b)
	}
	for _, s := range []string{"[engine]\nworkers = [0]\n", "[[shards]]\nname = \"a\"\n[[shards]]\n", "a.b.c = 1\n[a]\n",
		"[[models]]\nadapters = [{ id = \"x\" }, 3]\n", "x = { y = { z = [1, {w = 2}] } }\n", "[[a.b]]\n[[a.b.c]]\n[a]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.toml", data)
		if err == nil && cfg == nil {
			t.Fatal("nil config without an error")
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
