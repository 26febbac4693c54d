package sluice

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// tcpReadBufferLen is the pooled receive buffer; larger frames get their
// own (aligned) buffer.
const tcpReadBufferLen = 1 << 16

// TCP is the stream transport: frames back to back, each delimited by its
// own header (header_len + payload_len), no other framing.
type TCP struct {
	conn        net.Conn
	r           *bufio.Reader
	wmu         sync.Mutex
	frameLenMax int
}

// DialTCP connects to addr. Frames longer than frameLenMax (at most the
// wire limit, 256 MiB) are refused on receive: the stream is then
// unusable and the read fails.
func DialTCP(ctx context.Context, addr string, frameLenMax int) (*TCP, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true) // one frame is one message: do not wait to coalesce
	}
	return NewTCP(c, frameLenMax), nil
}

// NewTCP wraps a connected stream (tests use net.Pipe or a listener's
// side).
func NewTCP(c net.Conn, frameLenMax int) *TCP {
	if frameLenMax <= 0 || frameLenMax > wire.FrameLenMax {
		frameLenMax = wire.FrameLenMax
	}
	return &TCP{conn: c, r: bufio.NewReaderSize(c, 64<<10), frameLenMax: frameLenMax}
}

// WriteFrame writes one frame whole; a mutex keeps concurrent frames from
// interleaving.
func (t *TCP) WriteFrame(frame []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.conn.Write(frame)
	return err
}

// ErrFraming: a stream carried a length that no frame can have; the
// connection cannot find the next frame and is given up.
var ErrFraming = fmt.Errorf("%w: stream framing lost", ErrConnectionLost)

// ReadFrame reads exactly one frame: the fixed header, then the rest of
// header_len + payload_len.
func (t *TCP) ReadFrame(buf []byte) ([]byte, error) {
	var hdr [wire.FixedHeaderLen]byte
	if _, err := io.ReadFull(t.r, hdr[:]); err != nil {
		return nil, err
	}
	headerLen := int(binary.LittleEndian.Uint16(hdr[8:]))
	frameLen := uint64(headerLen) + uint64(binary.LittleEndian.Uint32(hdr[32:]))
	if string(hdr[:4]) != wire.Magic || headerLen < wire.FixedHeaderLen || headerLen > wire.HeaderLenMax ||
		frameLen > uint64(t.frameLenMax) {
		return nil, fmt.Errorf("%w: header_len %d, frame length %d (limit %d)", ErrFraming, headerLen, frameLen, t.frameLenMax)
	}
	if uint64(cap(buf)) < frameLen {
		buf = alignedBuffer(int(frameLen))
	}
	buf = buf[:frameLen]
	copy(buf, hdr[:])
	if _, err := io.ReadFull(t.r, buf[wire.FixedHeaderLen:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// FrameLenMax is the configured limit.
func (t *TCP) FrameLenMax() int { return t.frameLenMax }

// ReadBufferLen is the pooled buffer size.
func (t *TCP) ReadBufferLen() int { return tcpReadBufferLen }

// Stream is true.
func (t *TCP) Stream() bool { return true }

// Close closes the connection.
func (t *TCP) Close() error { return t.conn.Close() }

// LocalAddr is the connection's local address.
func (t *TCP) LocalAddr() net.Addr { return t.conn.LocalAddr() }
