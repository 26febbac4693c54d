// Package fdsign signs front-door HTTP requests with Sluice-HMAC-v2
// (docs/frontdoor.md, "Request signing"): HMAC-SHA256 with the tenant's
// key over a canonical string of the method, path, query, routing
// headers, timestamp, nonce and the SHA-256 of the body. The front door
// checks it (dataplane/frontdoor/src/signing.rs); this is the client half.
package fdsign

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// Scheme is the Authorization header's scheme.
const Scheme = "Sluice-HMAC-v2"

// canonicalTag is the canonical string's first line.
const canonicalTag = "SLUICE-HMAC-V2"

// Signed is what a request signs besides its body's bytes.
type Signed struct {
	Tenant uint32
	Method string // "POST", "GET"
	Path   string // as sent, not decoded
	Query  string // as sent, without '?'; "" for none
	// The routing headers as sent ("" when absent); trimmed when signed.
	ModelVersion string // X-Model-Version
	Adapter      string // X-Lora-Adapter-ID
	Intent       string // X-AI-Intent
	TsMs         uint64 // Unix time, milliseconds
	Nonce        string // 16 to 64 of [A-Za-z0-9_-], new for every request
	BodySHA256   string // BodySHA256(body): 64 lower-case hex digits
}

// BodySHA256 is the body's SHA-256 in lower-case hex (no body: of "").
func BodySHA256(body []byte) string {
	d := sha256.Sum256(body)
	return hex.EncodeToString(d[:])
}

// Canonical is the string the signature covers: the fields one a line,
// no trailing newline.
func Canonical(s *Signed) string {
	return strings.Join([]string{
		canonicalTag,
		strconv.FormatUint(uint64(s.Tenant), 10),
		s.Method,
		s.Path,
		s.Query,
		strings.TrimSpace(s.ModelVersion),
		strings.TrimSpace(s.Adapter),
		strings.TrimSpace(s.Intent),
		strconv.FormatUint(s.TsMs, 10),
		s.Nonce,
		s.BodySHA256,
	}, "\n")
}

// Header is the Authorization value of a request signed with key.
func Header(key []byte, s *Signed) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(Canonical(s)))
	return Scheme + " tenant=" + strconv.FormatUint(uint64(s.Tenant), 10) +
		", ts=" + strconv.FormatUint(s.TsMs, 10) +
		", nonce=" + s.Nonce +
		", body=" + s.BodySHA256 +
		", sig=" + hex.EncodeToString(mac.Sum(nil))
}

// Nonce is a fresh random nonce: 32 lower-case hex digits.
func Nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}

// Parsed is an Authorization value read back (for tests and stand-ins
// of the front door).
type Parsed struct {
	Tenant     uint32
	TsMs       uint64
	Nonce      string
	BodySHA256 string
	Sig        string
}

// Parse reads an Authorization value of the scheme; false when it is not
// one in the exact form Header writes.
func Parse(v string) (Parsed, bool) {
	var p Parsed
	rest, ok := strings.CutPrefix(v, Scheme+" ")
	if !ok {
		return p, false
	}
	parts := strings.Split(rest, ", ")
	if len(parts) != 5 {
		return p, false
	}
	want := []string{"tenant", "ts", "nonce", "body", "sig"}
	vals := make([]string, 5)
	for i, part := range parts {
		k, val, ok := strings.Cut(part, "=")
		if !ok || k != want[i] {
			return p, false
		}
		vals[i] = val
	}
	t, err := strconv.ParseUint(vals[0], 10, 32)
	if err != nil {
		return p, false
	}
	ts, err := strconv.ParseUint(vals[1], 10, 64)
	if err != nil {
		return p, false
	}
	return Parsed{Tenant: uint32(t), TsMs: ts, Nonce: vals[2], BodySHA256: vals[3], Sig: vals[4]}, true
}

// Verify checks that header signs s (whose Tenant, TsMs, Nonce and
// BodySHA256 are taken from the header) with key, and that body hashes to
// the digest it names.
func Verify(key []byte, header string, s Signed, body []byte) bool {
	p, ok := Parse(header)
	if !ok {
		return false
	}
	s.Tenant, s.TsMs, s.Nonce, s.BodySHA256 = p.Tenant, p.TsMs, p.Nonce, p.BodySHA256
	if BodySHA256(body) != p.BodySHA256 {
		return false
	}
	return hmac.Equal([]byte(Header(key, &s)), []byte(header))
}
