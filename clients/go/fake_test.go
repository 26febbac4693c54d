package sluice

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// A UDP responder for the unit tests: each datagram goes to handle, and
// whatever it returns is sent back, datagram by datagram. The tests that
// claim the real engine are in e2e_test.go.
type fakeServer struct {
	conn   *net.UDPConn
	handle func(b []byte) [][]byte
	wg     sync.WaitGroup
}

func startFake(t *testing.T, handle func(b []byte) [][]byte) *fakeServer {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{conn: conn, handle: handle}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 1<<16)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			for _, out := range handle(append([]byte(nil), buf[:n]...)) {
				_, _ = conn.WriteToUDP(out, from)
			}
		}
	}()
	t.Cleanup(func() { conn.Close(); s.wg.Wait() })
	return s
}

func (s *fakeServer) addr() string { return s.conn.LocalAddr().String() }

func mustEmit(r wire.Repr) []byte {
	b, _, err := r.Append(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// echoAnswer answers a request with its own tensors, a ping with a pong, a
// negotiation with a fixed schema; a request for model "fail-N" gets error
// code N.
func echoAnswer(b []byte) []byte {
	f, err := wire.Parse(b)
	if err != nil {
		return mustEmit(wire.Repr{Kind: wire.KindError, Body: &wire.ErrorBody{Code: err.(wire.Error).Code(), Message: err.Error()}})
	}
	switch f.Kind() {
	case wire.KindPing:
		return mustEmit(wire.Repr{Kind: wire.KindPong, RequestID: f.RequestID(), TenantID: f.TenantID()})
	case wire.KindNegotiateRequest:
		nq, _ := f.NegotiateRequest()
		if nq.Subject == "missing" {
			return mustEmit(wire.ErrorFor(&f, wire.CodeUnknownSubject, "no subject missing"))
		}
		return mustEmit(wire.Repr{Kind: wire.KindNegotiateResponse, RequestID: f.RequestID(),
			Body: &wire.NegotiateResponse{SchemaID: 5, Version: nq.VersionHint + 1, TTLms: 60000, SchemaType: wire.SchemaJSON, Schema: []byte(`{"type":"object"}`)}})
	}
	var code int
	if n, _ := fmt.Sscanf(f.Model(), "fail-%d", &code); n == 1 {
		return mustEmit(wire.ErrorFor(&f, wire.Code(code), "as asked"))
	}
	r := wire.Repr{Kind: wire.KindResponse, RequestID: f.RequestID(), TenantID: f.TenantID(), Model: f.Model(), ModelVersion: f.ModelVersion()}
	for i := 0; i < f.NumTensors(); i++ {
		d := f.Tensor(i)
		r.Tensors = append(r.Tensors, wire.TensorRepr{Name: d.Name(), DType: d.DType, Dims: d.Dims(), Data: f.TensorData(d)})
	}
	return mustEmit(r)
}
