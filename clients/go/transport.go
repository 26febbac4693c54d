package sluice

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// Transport carries whole frames to one server and back. The client writes
// from many goroutines and reads from one.
//
// Datagram transports (UDP) carry one frame per datagram. Stream
// transports (TCP) carry frames back to back with no extra framing: the
// fixed header's header_len and payload_len give each frame's length.
type Transport interface {
	// WriteFrame sends one whole frame. Safe for concurrent use; frames of
	// concurrent calls never interleave.
	WriteFrame(frame []byte) error
	// ReadFrame reads the next frame into buf and returns it; when the
	// frame does not fit buf it returns a new slice holding it. Called
	// from one goroutine only. A datagram transport returns whatever
	// arrived (garbage included: the client checks it).
	ReadFrame(buf []byte) ([]byte, error)
	// FrameLenMax is the largest frame the transport carries.
	FrameLenMax() int
	// ReadBufferLen is the receive buffer size the client should pool.
	ReadBufferLen() int
	// Stream reports whether a read error means the connection is gone
	// (requests in flight fail with ErrConnectionLost).
	Stream() bool
	// Close closes the connection and unblocks ReadFrame.
	Close() error
	// LocalAddr is the local address, for logs and tests.
	LocalAddr() net.Addr
}

// DialTransport connects the transport named by network ("udp" or "tcp")
// to addr.
func DialTransport(ctx context.Context, network, addr string, opts Options) (Transport, error) {
	switch network {
	case "", "udp":
		return DialUDP(ctx, addr, opts.SocketBufferBytes)
	case "tcp":
		return DialTCP(ctx, addr, opts.frameLenMax())
	}
	return nil, fmt.Errorf("sluice: unknown transport %q (udp or tcp)", network)
}

// splitAddr takes "udp://host:port", "tcp://host:port" or "host:port".
func splitAddr(addr, network string) (string, string) {
	if n, rest, ok := strings.Cut(addr, "://"); ok {
		return n, rest
	}
	return network, addr
}
