package sluice

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"
)

// A TCP responder for the stream transport: frames are read back to back
// by their own header lengths (written here independently of tcp.go) and
// answered by answer, whose bytes are written in small random pieces so
// that the client must reassemble them. The engine has no TCP listener yet.
func startTCPFake(t *testing.T, answer func(n int, b []byte) ([]byte, bool)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				rng := rand.New(rand.NewSource(1))
				var wmu sync.Mutex
				for n := 0; ; n++ {
					hdr := make([]byte, 96)
					if _, err := io.ReadFull(conn, hdr); err != nil {
						return
					}
					total := int(binary.LittleEndian.Uint16(hdr[8:])) + int(binary.LittleEndian.Uint32(hdr[32:]))
					b := make([]byte, total)
					copy(b, hdr)
					if _, err := io.ReadFull(conn, b[96:]); err != nil {
						return
					}
					out, keep := answer(n, b)
					if !keep {
						return
					}
					wmu.Lock()
					for len(out) > 0 {
						// Tiny pieces for the first frames, then larger ones.
						piece := 40
						if n > 4 {
							piece = 8192
						}
						k := min(len(out), 1+rng.Intn(piece))
						if _, err := conn.Write(out[:k]); err != nil {
							wmu.Unlock()
							return
						}
						out = out[k:]
					}
					wmu.Unlock()
				}
			}()
		}
	}()
	return l.Addr().String()
}

func TestTCPConcurrentRequests(t *testing.T) {
	addr := startTCPFake(t, func(_ int, b []byte) ([]byte, bool) { return echoAnswer(b), true })
	c := dial(t, "tcp://"+addr, Options{TenantID: 2, Key: []byte("k")})
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				// Frames above one datagram go over TCP.
				x := make([]uint16, 40000+g)
				x[0], x[len(x)-1] = uint16(g), uint16(i)
				resp, err := c.Infer(context.Background(), NewRequest("echo", "1", NewTensor("x", []uint64{uint64(len(x))}, x)))
				if err != nil {
					errs <- err
					return
				}
				y, _ := Values[uint16](resp.Outputs[0])
				if len(y) != len(x) || y[0] != uint16(g) || y[len(y)-1] != uint16(i) {
					errs <- fmt.Errorf("goroutine %d request %d: wrong answer", g, i)
					return
				}
				resp.Release()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A malformed frame with sound lengths is skipped; the stream goes on.
func TestTCPMalformedFrameIsSkipped(t *testing.T) {
	addr := startTCPFake(t, func(_ int, b []byte) ([]byte, bool) {
		bad := echoAnswer(b)
		bad = append([]byte(nil), bad...)
		bad[79] = 1 // reserved1
		return append(bad, echoAnswer(b)...), true
	})
	c := dial(t, "tcp://"+addr, Options{})
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Stats().Malformed != 1 {
		t.Fatalf("stats %+v", c.Stats())
	}
}

// The server drops the connection: requests in flight and later ones fail
// with ErrConnectionLost, which is retryable.
func TestTCPConnectionLost(t *testing.T) {
	addr := startTCPFake(t, func(n int, b []byte) ([]byte, bool) {
		if n == 0 {
			return echoAnswer(b), true
		}
		time.Sleep(20 * time.Millisecond)
		return nil, false
	})
	c := dial(t, "tcp://"+addr, Options{Timeout: 5 * time.Second})
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err := c.Ping(context.Background())
	if !errors.Is(err, ErrConnectionLost) || !IsRetryable(err) {
		t.Fatalf("in flight: %v", err)
	}
	if _, err := c.Ping(context.Background()); !errors.Is(err, ErrConnectionLost) {
		t.Fatalf("after: %v", err)
	}
}

// Bytes that cannot start a frame lose the stream.
func TestTCPFramingLost(t *testing.T) {
	addr := startTCPFake(t, func(_ int, b []byte) ([]byte, bool) {
		return make([]byte, 200), true
	})
	c := dial(t, "tcp://"+addr, Options{Timeout: 5 * time.Second})
	if _, err := c.Ping(context.Background()); !errors.Is(err, ErrFraming) || !errors.Is(err, ErrConnectionLost) {
		t.Fatal(err)
	}
}

// A frame longer than Options.FrameLenMax is refused before it is read.
func TestTCPFrameLenMax(t *testing.T) {
	addr := startTCPFake(t, func(_ int, b []byte) ([]byte, bool) { return echoAnswer(b), true })
	c := dial(t, "tcp://"+addr, Options{FrameLenMax: 4096, Timeout: 5 * time.Second})
	big := NewTensor("x", []uint64{8192}, make([]uint8, 8192))
	if _, err := c.Infer(context.Background(), NewRequest("echo", "1", big)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatal(err)
	}
	if _, err := c.Infer(context.Background(), NewRequest("echo", "1", NewTensor("x", []uint64{100}, make([]uint8, 100)))); err != nil {
		t.Fatal(err)
	}
}
