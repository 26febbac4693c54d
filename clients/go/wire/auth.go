package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
)

// TenantKey computes and checks frame tags: HMAC-SHA256 over the header
// except the tag field, truncated to 16 bytes, with the FORWARDED flag read
// as zero, followed by the body for a negotiate request (docs/wire.md,
// "Authentication"). Tensor data and other bodies are not covered. Safe for
// concurrent use.
type TenantKey struct {
	// Keyed MACs, reset between uses, so that a tag costs no re-keying.
	macs sync.Pool
}

// NewTenantKey keys a MAC; any key length is accepted (HMAC hashes long
// keys first). The key bytes are copied.
func NewTenantKey(key []byte) *TenantKey {
	k := append([]byte(nil), key...)
	t := &TenantKey{}
	t.macs.New = func() any { return hmac.New(sha256.New, k) }
	return t
}

// Tag computes the tag of a checked frame f.
func (t *TenantKey) Tag(f *Frame) [AuthTagLen]byte {
	var body []byte
	if f.Kind() == KindNegotiateRequest {
		body = f.Payload() // at most 263 bytes: the subject asked for
	}
	return t.tag(f.b[:f.HeaderLen()], body)
}

func (t *TenantKey) tag(header, body []byte) [AuthTagLen]byte {
	mac := t.macs.Get().(hash.Hash)
	mac.Reset()
	var flags [2]byte
	le.PutUint16(flags[:], le.Uint16(header[offFlags:])&^FlagForwarded)
	mac.Write(header[:offFlags])
	mac.Write(flags[:])
	mac.Write(header[offFlags+2 : offAuthTag])
	mac.Write(header[offAuthTag+AuthTagLen:])
	mac.Write(body)
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	t.macs.Put(mac)
	var tag [AuthTagLen]byte
	copy(tag[:], sum[:AuthTagLen])
	return tag
}

// Verify checks the tag of a checked frame in constant time.
func (t *TenantKey) Verify(f *Frame) bool {
	tag := t.Tag(f)
	return hmac.Equal(tag[:], f.AuthTag())
}

// Sign signs a checked frame in place: it sets the AUTHENTICATED flag, then
// writes the tag over the header that now carries it.
func (t *TenantKey) Sign(f *Frame) {
	le.PutUint16(f.b[offFlags:], f.Flags()|FlagAuthenticated)
	tag := t.Tag(f)
	copy(f.b[offAuthTag:], tag[:])
}
