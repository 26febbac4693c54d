package wire

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"testing"
)

// The conformance vectors (docs/vectors/README.md), generated from the Rust
// builder: every valid one parses into its fields and rebuilds byte for
// byte with this package's builder; every invalid one fails with its error.

type vectorFile struct {
	Format      int             `json:"format"`
	WireVersion int             `json:"wire_version"`
	Valid       []validVector   `json:"valid"`
	Invalid     []invalidVector `json:"invalid"`
}

type validVector struct {
	Name   string   `json:"name"`
	Source string   `json:"source"`
	Hex    string   `json:"hex"`
	Frame  frameDoc `json:"frame"`
}

type invalidVector struct {
	Name  string `json:"name"`
	Hex   string `json:"hex"`
	Error string `json:"error"`
}

type frameDoc struct {
	Kind          string `json:"kind"`
	Version       uint8  `json:"version"`
	Flags         uint16 `json:"flags"`
	TenantID      uint32 `json:"tenant_id"`
	RequestID     string `json:"request_id"`
	DeadlineUs    string `json:"deadline_us"`
	SchemaID      uint32 `json:"schema_id"`
	SchemaVersion uint32 `json:"schema_version"`
	TokenCount    uint32 `json:"token_count"`
	Trace         struct {
		TraceID string `json:"trace_id"`
		SpanID  string `json:"span_id"`
		Flags   uint8  `json:"flags"`
	} `json:"trace"`
	Model        string `json:"model"`
	ModelVersion string `json:"model_version"`
	Adapter      string `json:"adapter"`
	Intent       string `json:"intent"`
	Extensions   []struct {
		Key      string `json:"key"`
		ValueHex string `json:"value_hex"`
	} `json:"extensions"`
	Tensors []struct {
		Name       string   `json:"name"`
		DType      uint8    `json:"dtype"`
		DTypeName  string   `json:"dtype_name"`
		Dims       []uint64 `json:"dims"`
		DataOffset int      `json:"data_offset"`
		DataLen    int      `json:"data_len"`
		DataHex    string   `json:"data_hex"`
	} `json:"tensors"`
	Body *struct {
		Error *struct {
			Code     uint16  `json:"code"`
			CodeName *string `json:"code_name"`
			Message  string  `json:"message"`
		} `json:"error"`
		NegotiateRequest *struct {
			Subject     string `json:"subject"`
			VersionHint uint32 `json:"version_hint"`
		} `json:"negotiate_request"`
		NegotiateResponse *struct {
			SchemaID   uint32 `json:"schema_id"`
			Version    uint32 `json:"version"`
			TTLms      uint32 `json:"ttl_ms"`
			SchemaType uint8  `json:"schema_type"`
			SchemaHex  string `json:"schema_hex"`
		} `json:"negotiate_response"`
	} `json:"body"`
	Auth *struct {
		TenantKeyHex string `json:"tenant_key_hex"`
		TagHex       string `json:"tag_hex"`
	} `json:"auth"`
	Stream *struct {
		StreamID       string `json:"stream_id"`
		Seq            uint32 `json:"seq"`
		Flags          uint8  `json:"flags"`
		EndReason      uint8  `json:"end_reason"`
		TokensPerFrame uint16 `json:"tokens_per_frame"`
		MaxTokens      uint32 `json:"max_tokens"`
	} `json:"stream"`
	SenderID *string `json:"sender_id"`
}

const vectorsPath = "../../../docs/vectors/frames.json"

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.Format != 1 || v.WireVersion != Version || len(v.Valid) == 0 || len(v.Invalid) == 0 {
		t.Fatalf("vectors: format %d, wire version %d, %d valid, %d invalid", v.Format, v.WireVersion, len(v.Valid), len(v.Invalid))
	}
	return v
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func u64(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestVectorsParse(t *testing.T) {
	for _, v := range loadVectors(t).Valid {
		t.Run(v.Name, func(t *testing.T) {
			b := unhex(t, v.Hex)
			f, err := Parse(b)
			if err != nil {
				t.Fatalf("%s: %v", v.Source, err)
			}
			d := v.Frame
			check := func(what string, got, want any) {
				t.Helper()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: got %v, want %v", what, got, want)
				}
			}
			check("kind", f.Kind().String(), d.Kind)
			check("version", f.Version(), d.Version)
			check("flags", f.Flags(), d.Flags)
			check("tenant_id", f.TenantID(), d.TenantID)
			check("request_id", f.RequestID(), u64(t, d.RequestID))
			check("deadline_us", f.DeadlineUs(), u64(t, d.DeadlineUs))
			check("schema_id", f.SchemaID(), d.SchemaID)
			check("schema_version", f.SchemaVersion(), d.SchemaVersion)
			check("token_count", f.TokenCount(), d.TokenCount)
			tr := f.Trace()
			check("trace_id", hex.EncodeToString(tr.TraceID[:]), d.Trace.TraceID)
			check("span_id", hex.EncodeToString(tr.SpanID[:]), d.Trace.SpanID)
			check("trace flags", tr.Flags, d.Trace.Flags)
			check("model", f.Model(), d.Model)
			check("model_version", f.ModelVersion(), d.ModelVersion)
			check("adapter", f.Adapter(), d.Adapter)
			check("intent", f.Intent(), d.Intent)
			sender, hasSender := f.SenderID()
			check("has sender", hasSender, d.SenderID != nil)
			if d.SenderID != nil {
				check("sender_id", sender, u64(t, *d.SenderID))
			}
			st, hasStream := f.Stream()
			check("has stream", hasStream, d.Stream != nil)
			if d.Stream != nil {
				want := StreamHeader{
					StreamID:       u64(t, d.Stream.StreamID),
					Seq:            d.Stream.Seq,
					Flags:          d.Stream.Flags,
					EndReason:      EndReason(d.Stream.EndReason),
					TokensPerFrame: d.Stream.TokensPerFrame,
					MaxTokens:      d.Stream.MaxTokens,
				}
				check("stream", st, want)
				v, _ := f.ExtensionValue(StreamExtKey)
				check("stream bytes", hex.EncodeToString(want.Bytes()), hex.EncodeToString(v))
			}
			check("extension count", f.NumExtensions(), len(d.Extensions))
			for i, e := range d.Extensions {
				k, val := f.Extension(i)
				check("extension key", k, e.Key)
				check("extension value", hex.EncodeToString(val), e.ValueHex)
			}
			if len(d.Extensions) > 0 {
				first, _ := f.ExtensionValue(d.Extensions[0].Key)
				check("extension lookup", hex.EncodeToString(first), d.Extensions[0].ValueHex)
			}
			check("tensor count", f.NumTensors(), len(d.Tensors))
			for i, want := range d.Tensors {
				td := f.Tensor(i)
				check("tensor name", td.Name(), want.Name)
				check("dtype", uint8(td.DType), want.DType)
				check("dtype name", td.DType.String(), want.DTypeName)
				dims := td.Dims()
				if len(dims) == 0 {
					dims = []uint64{}
				}
				if want.Dims == nil {
					want.Dims = []uint64{}
				}
				check("dims", dims, want.Dims)
				check("data_offset", td.DataOffset, want.DataOffset)
				check("data_len", td.DataLen, want.DataLen)
				check("data", hex.EncodeToString(f.TensorData(td)), want.DataHex)
			}
			checkBodyDoc(t, &f, d)
			if d.Auth != nil {
				key := NewTenantKey(unhex(t, d.Auth.TenantKeyHex))
				check("tag", hex.EncodeToString(f.AuthTag()), d.Auth.TagHex)
				if !key.Verify(&f) {
					t.Error("tag does not verify with the vector's key")
				}
				if NewTenantKey([]byte("another key")).Verify(&f) {
					t.Error("tag verifies with another key")
				}
			}
		})
	}
}

func checkBodyDoc(t *testing.T, f *Frame, d frameDoc) {
	t.Helper()
	eb, isErr := f.ErrorBody()
	nq, isNq := f.NegotiateRequest()
	ns, isNs := f.NegotiateResponse()
	switch {
	case d.Body == nil:
		if isErr || isNq || isNs {
			t.Fatal("a body where the vector has none")
		}
	case d.Body.Error != nil:
		w := d.Body.Error
		if !isErr || uint16(eb.Code) != w.Code || eb.Message != w.Message {
			t.Fatalf("error body %+v, want %+v", eb, *w)
		}
		if w.CodeName == nil {
			if eb.Code.Known() || eb.Code.Retryable() {
				t.Fatalf("code %d should be unknown and not retryable", eb.Code)
			}
		} else if eb.Code.String() != *w.CodeName {
			t.Fatalf("code name %s, want %s", eb.Code, *w.CodeName)
		}
	case d.Body.NegotiateRequest != nil:
		w := d.Body.NegotiateRequest
		if !isNq || nq.Subject != w.Subject || nq.VersionHint != w.VersionHint {
			t.Fatalf("negotiate request %+v, want %+v", nq, *w)
		}
	case d.Body.NegotiateResponse != nil:
		w := d.Body.NegotiateResponse
		if !isNs || ns.SchemaID != w.SchemaID || ns.Version != w.Version || ns.TTLms != w.TTLms ||
			uint8(ns.SchemaType) != w.SchemaType || hex.EncodeToString(ns.Schema) != w.SchemaHex {
			t.Fatalf("negotiate response %+v, want %+v", ns, *w)
		}
	default:
		t.Fatal("body of no known kind")
	}
}

// reprOf builds the Repr that the vector's fields describe.
func reprOf(t *testing.T, d frameDoc) Repr {
	kind, ok := KindByName(d.Kind)
	if !ok || d.Version != Version {
		t.Fatalf("kind %q version %d", d.Kind, d.Version)
	}
	r := Repr{
		Kind: kind, Flags: d.Flags, TenantID: d.TenantID,
		RequestID: u64(t, d.RequestID), DeadlineUs: u64(t, d.DeadlineUs),
		SchemaID: d.SchemaID, SchemaVersion: d.SchemaVersion, TokenCount: d.TokenCount,
		Model: d.Model, ModelVersion: d.ModelVersion, Adapter: d.Adapter, Intent: d.Intent,
	}
	copy(r.Trace.TraceID[:], unhex(t, d.Trace.TraceID))
	copy(r.Trace.SpanID[:], unhex(t, d.Trace.SpanID))
	r.Trace.Flags = d.Trace.Flags
	for _, e := range d.Extensions {
		r.Extensions = append(r.Extensions, Extension{Key: e.Key, Value: unhex(t, e.ValueHex)})
	}
	for _, x := range d.Tensors {
		r.Tensors = append(r.Tensors, TensorRepr{Name: x.Name, DType: DType(x.DType), Dims: x.Dims, Data: unhex(t, x.DataHex)})
	}
	if b := d.Body; b != nil {
		switch {
		case b.Error != nil:
			r.Body = &ErrorBody{Code: Code(b.Error.Code), Message: b.Error.Message}
		case b.NegotiateRequest != nil:
			r.Body = &NegotiateRequest{Subject: b.NegotiateRequest.Subject, VersionHint: b.NegotiateRequest.VersionHint}
		case b.NegotiateResponse != nil:
			n := b.NegotiateResponse
			r.Body = &NegotiateResponse{SchemaID: n.SchemaID, Version: n.Version, TTLms: n.TTLms,
				SchemaType: SchemaType(n.SchemaType), Schema: unhex(t, n.SchemaHex)}
		}
	}
	return r
}

func TestVectorsRebuild(t *testing.T) {
	for _, v := range loadVectors(t).Valid {
		t.Run(v.Name, func(t *testing.T) {
			r := reprOf(t, v.Frame)
			want := unhex(t, v.Hex)
			// Emit into a dirty buffer: every byte of the frame is written.
			buf := bytes.Repeat([]byte{0xa5}, len(want)+7)
			l, err := r.Emit(buf)
			if err != nil {
				t.Fatal(err)
			}
			got := buf[:l.FrameLen]
			for i, x := range v.Frame.Tensors {
				if l.TensorOffsets[i] != x.DataOffset {
					t.Errorf("tensor %s at %d, want %d", x.Name, l.TensorOffsets[i], x.DataOffset)
				}
			}
			if v.Frame.Auth != nil {
				f, err := Parse(got)
				if err != nil {
					t.Fatal(err)
				}
				NewTenantKey(unhex(t, v.Frame.Auth.TenantKeyHex)).Sign(&f)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("rebuilt frame differs:\n got %x\nwant %x", got, want)
			}
			app, _, err := r.Append([]byte("prefix"))
			if err != nil || string(app[:6]) != "prefix" || (v.Frame.Auth == nil && !bytes.Equal(app[6:], want)) {
				t.Fatalf("Append: %v", err)
			}
		})
	}
}

func TestVectorsInvalid(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range loadVectors(t).Invalid {
		t.Run(v.Name, func(t *testing.T) {
			_, err := Parse(unhex(t, v.Hex))
			e, ok := err.(Error)
			if !ok || e.Name() != v.Error {
				t.Fatalf("got %v, want %s", err, v.Error)
			}
			seen[v.Error] = true
		})
	}
	// Every parse error of the Rust crate has a vector and a Go twin.
	for _, e := range Errors {
		if e != ErrBufferTooSmall && !seen[e.Name()] {
			t.Errorf("no invalid vector for %s", e.Name())
		}
	}
}
