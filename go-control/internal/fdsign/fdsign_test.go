package fdsign

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docs/frontdoor.md's worked example, byte for byte (the Rust signer is
// held to the same one by dataplane/frontdoor/tests/signing.rs).
func TestDocumentedVector(t *testing.T) {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	body := []byte(`{"inputs":[]}`)
	s := &Signed{Tenant: 7, Method: "POST", Path: "/v2/models/mlp/versions/1/infer", TsMs: 1700000000000,
		Nonce: "0123456789abcdef0123456789abcdef", BodySHA256: BodySHA256(body)}
	const (
		digest    = "62b512d8c76bbed3048fc81bd94bd2aeaab2de4d3b36edbed2f3d3dd8ff3e33e"
		canonical = "SLUICE-HMAC-V2\n7\nPOST\n/v2/models/mlp/versions/1/infer\n\n\n\n\n1700000000000\n0123456789abcdef0123456789abcdef\n" + digest
		header    = "Sluice-HMAC-v2 tenant=7, ts=1700000000000, nonce=0123456789abcdef0123456789abcdef, body=" + digest +
			", sig=e1fc251d80cae3f08eac8cacb147ecd884c2067e60354eefd21f7ed792b6e375"
	)
	if s.BodySHA256 != digest {
		t.Fatalf("body digest %s", s.BodySHA256)
	}
	if got := Canonical(s); got != canonical {
		t.Fatalf("canonical\n%q\nwant\n%q", got, canonical)
	}
	if got := Header(key, s); got != header {
		t.Fatalf("header\n%s\nwant\n%s", got, header)
	}
	// The same strings as the document shows them.
	doc, err := os.ReadFile("../../../docs/frontdoor.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`"+strings.ReplaceAll(canonical, "\n", `\n`)+"`") {
		t.Fatal("docs/frontdoor.md no longer shows this canonical string")
	}
	if !strings.Contains(string(doc), "`"+header+"`") {
		t.Fatal("docs/frontdoor.md no longer shows this header")
	}
	if !Verify(key, header, Signed{Method: "POST", Path: s.Path}, body) {
		t.Fatal("the documented header does not verify")
	}
}

// The routing headers are signed: moving a header to another version,
// adapter or intent, or another body, fails.
func TestRoutingHeadersAndBodyAreSigned(t *testing.T) {
	key := []byte("jobs-test-tenant-key-0123456789")
	body := []byte(`{"prompt":"Explain quantum entanglement","model":"qwen3-72b"}`)
	base := Signed{Tenant: 1, Method: "POST", Path: "/v1/completions", ModelVersion: "1", Intent: "reasoning"}
	s := base
	s.TsMs, s.Nonce, s.BodySHA256 = 1, Nonce(), BodySHA256(body)
	h := Header(key, &s)
	if !Verify(key, h, base, body) {
		t.Fatal("does not verify")
	}
	for name, edit := range map[string]func(*Signed){
		"version": func(x *Signed) { x.ModelVersion = "2" },
		"adapter": func(x *Signed) { x.Adapter = "a" },
		"intent":  func(x *Signed) { x.Intent = "chat" },
		"path":    func(x *Signed) { x.Path = "/v1/chat/completions" },
		"query":   func(x *Signed) { x.Query = "a=b" },
	} {
		o := base
		edit(&o)
		if Verify(key, h, o, body) {
			t.Errorf("%s moved and still verifies", name)
		}
	}
	if Verify(key, h, base, append(body, ' ')) {
		t.Error("another body verifies")
	}
	if Verify([]byte("another-key-0123456789abcdef"), h, base, body) {
		t.Error("another key verifies")
	}
	// Trimmed when signed, as the front door trims what it reads.
	o := s
	o.ModelVersion, o.Intent = " 1 ", "reasoning "
	if Header(key, &o) != h {
		t.Error("untrimmed routing headers sign differently")
	}
}

func TestNonceForm(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)
	a, b := Nonce(), Nonce()
	if !re.MatchString(a) || a == b {
		t.Fatalf("nonces %q %q", a, b)
	}
	if _, ok := Parse("Sluice-HMAC tenant=1, ts=1"); ok {
		t.Fatal("v1 header parsed")
	}
}
