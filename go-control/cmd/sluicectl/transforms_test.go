package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTransformsCommands(t *testing.T) {
	addr, fake := startDaemon(t, "tok")
	env := map[string]string{"SLUICE_ADDR": addr, "SLUICE_TOKEN": "tok"}
	reg := func(method, path, body string) {
		req, _ := http.NewRequest(method, "http://"+addr+"/registry"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %v %v", method, path, err, resp)
		}
		resp.Body.Close()
	}
	reg("PUT", "/config/chat", `{"compatibility":"NONE"}`)
	reg("POST", "/subjects/chat/versions", `{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`)
	reg("POST", "/subjects/chat/versions", `{"schemaType":"JSON","schema":"{\"type\":\"object\",\"required\":[\"a\"]}"}`)
	for deadline := time.Now().Add(10 * time.Second); len(fake.Schemas()) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("schemas not pushed")
		}
	}

	if out := mustCtl(t, env, "transforms"); !strings.Contains(out, "no schema transforms") {
		t.Fatalf("empty list:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "m.wasm")
	os.WriteFile(file, []byte("\x00asm\x0d\x00\x01\x00"), 0o600)
	if out := mustCtl(t, env, "transforms", "put", "chat", "1", "2", file); !strings.Contains(out, "transform chat 1 -> 2 loaded (8 bytes)") {
		t.Fatalf("put:\n%s", out)
	}
	if out := mustCtl(t, env, "transforms", "ls"); !strings.Contains(out, "chat     1->2") || !strings.Contains(out, "serving") {
		t.Fatalf("ls:\n%s", out)
	}
	if out := mustCtl(t, env, "-json", "transforms"); !strings.Contains(out, `"subject": "chat"`) {
		t.Fatalf("ls -json:\n%s", out)
	}
	core := filepath.Join(t.TempDir(), "core.wasm")
	os.WriteFile(core, []byte("\x00asm\x01\x00\x00\x00"), 0o600)
	if code, _, errs := ctl(t, env, "transforms", "put", "chat", "2", "1", core); code == 0 || !strings.Contains(errs, "component") {
		t.Fatalf("core module: exit %d: %s", code, errs)
	}
	if code, _, errs := ctl(t, env, "transforms", "put", "chat", "one", "2", file); code == 0 || !strings.Contains(errs, "usage") {
		t.Fatalf("bad version: exit %d: %s", code, errs)
	}
	if out := mustCtl(t, env, "transforms", "rm", "chat", "1", "2"); !strings.Contains(out, "removed") {
		t.Fatalf("rm:\n%s", out)
	}
	if code, _, _ := ctl(t, env, "transforms", "rm", "chat", "1", "2"); code == 0 {
		t.Fatal("rm of a missing transform succeeded")
	}
}
