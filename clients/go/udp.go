package sluice

import (
	"context"
	"net"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// DatagramLenMax is the largest UDP payload over IPv4: one frame travels in
// one datagram.
const DatagramLenMax = 65507

// udpReadBufferLen holds any datagram whole (a larger one would be cut and
// then rejected by the parser).
const udpReadBufferLen = 1 << 16

// UDP is the datagram transport: one connected socket, so the kernel drops
// datagrams from any address but the server's.
type UDP struct {
	conn *net.UDPConn
}

// DialUDP connects a UDP socket to addr. socketBufferBytes, when positive,
// sizes the kernel's receive and send buffers (capped by the kernel's
// net.core.rmem_max / wmem_max), so that bursts of answers are queued
// rather than dropped.
func DialUDP(ctx context.Context, addr string, socketBufferBytes int) (*UDP, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.UDPConn)
	if socketBufferBytes > 0 {
		// Best effort: the kernel caps them, which is fine.
		_ = conn.SetReadBuffer(socketBufferBytes)
		_ = conn.SetWriteBuffer(socketBufferBytes)
	}
	return &UDP{conn: conn}, nil
}

// WriteFrame sends one datagram. net.UDPConn writes are safe for
// concurrent use, and each is one datagram.
func (u *UDP) WriteFrame(frame []byte) error {
	_, err := u.conn.Write(frame)
	return err
}

// ReadFrame receives one datagram into buf.
func (u *UDP) ReadFrame(buf []byte) ([]byte, error) {
	n, err := u.conn.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// FrameLenMax is one datagram.
func (u *UDP) FrameLenMax() int { return min(DatagramLenMax, wire.FrameLenMax) }

// ReadBufferLen holds any datagram.
func (u *UDP) ReadBufferLen() int { return udpReadBufferLen }

// Stream is false: a read error (an ICMP "port unreachable") does not end
// the socket.
func (u *UDP) Stream() bool { return false }

// Close closes the socket.
func (u *UDP) Close() error { return u.conn.Close() }

// LocalAddr is the socket's local address.
func (u *UDP) LocalAddr() net.Addr { return u.conn.LocalAddr() }
