package rustengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// The project's JSON migration through the C ABI: checked and loaded by the
// real engine, listed with its counters; a core module and an unknown pair
// are refused with the sentinel and a message naming what is wrong.
func TestTransformsThroughTheABI(t *testing.T) {
	wasm, err := os.ReadFile("../../../target/transforms/json-migrate.wasm")
	if err != nil {
		t.Fatalf("%v: run scripts/build-transforms.sh first (scripts/test.sh does)", err)
	}
	e, err := engine.Open("rust", []byte(testConfig))
	if err != nil {
		t.Fatal(err)
	}
	defer e.(*Engine).Close()
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	chat := func(id, v int, file string) engine.Schema {
		b, err := os.ReadFile("../../../dataplane/transform/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		return engine.Schema{ID: id, Subject: "chat", Version: v, SchemaType: "JSON", Schema: string(b)}
	}
	doc := fmt.Sprintf(`[%s,%s]`, mustJSON(t, chat(41, 1, "chat-v1.json")), mustJSON(t, chat(42, 2, "chat-v2.json")))
	if err := e.Apply(engine.Change{Section: engine.SectionSchemas, Doc: []byte(doc)}); err != nil {
		t.Fatal(err)
	}
	epoch, err := e.PutTransform("chat", 1, 2, wasm)
	if err != nil || epoch == 0 {
		t.Fatalf("put: %d %v", epoch, err)
	}
	ts, err := e.Transforms()
	if err != nil || len(ts) != 1 || ts[0].Subject != "chat" || ts[0].From != 1 || ts[0].To != 2 || ts[0].Bytes != len(wasm) || len(ts[0].Digest) != 16 {
		t.Fatalf("transforms %+v %v", ts, err)
	}
	core := []byte("\x00asm\x01\x00\x00\x00")
	if _, err := e.PutTransform("chat", 2, 1, core); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a component") {
		t.Fatalf("core module: %v", err)
	}
	if _, err := e.PutTransform("chat", 1, 3, wasm); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("unregistered version: %v", err)
	}
	if err := e.RemoveTransform("chat", 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveTransform("chat", 1, 2); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
