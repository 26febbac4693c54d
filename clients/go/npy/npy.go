// Package npy reads and writes NumPy .npy files (format versions 1.0, 2.0
// and 3.0) holding arrays of the wire dtypes, so that tensors can go from
// Python to Sluice and back through files.
//
// Arrays are held as the wire carries them: little-endian, C (row-major)
// order. Big-endian and Fortran-order files are converted on read (one
// copy). NumPy has no bfloat16 dtype: bf16 arrays are written as float32
// (exactly), and files cannot hold bf16 to read.
package npy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Limits. A file beyond them is refused before anything is allocated for
// its data.
const (
	HeaderLenMax = 64 << 10         // the header dict, in bytes
	DataLenMax   = wire.FrameLenMax // array data, in bytes (256 MiB: a frame cannot carry more)
	RankMax      = wire.RankMax     // dimensions
)

// ErrFormat: the file is not a .npy file this package reads.
var ErrFormat = errors.New("npy: bad file")

// Array is an n-dimensional array.
type Array struct {
	DType wire.DType
	Shape []uint64
	Data  []byte // little-endian elements, C order
}

const magic = "\x93NUMPY"

// descr codes of the wire dtypes, without the byte-order character.
var descrOf = map[wire.DType]string{
	wire.Bool: "b1", wire.U8: "u1", wire.I8: "i1", wire.U16: "u2", wire.I16: "i2",
	wire.U32: "u4", wire.I32: "i4", wire.U64: "u8", wire.I64: "i8",
	wire.F16: "f2", wire.F32: "f4", wire.F64: "f8",
}

// Read reads one array.
func Read(r io.Reader) (*Array, error) {
	br := bufio.NewReader(r)
	var pre [8]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if string(pre[:6]) != magic {
		return nil, fmt.Errorf("%w: no .npy magic", ErrFormat)
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrFormat, err)
		}
		n := binary.LittleEndian.Uint32(b[:])
		if n > HeaderLenMax {
			return nil, fmt.Errorf("%w: header of %d bytes (limit %d)", ErrFormat, n, HeaderLenMax)
		}
		hlen = int(n)
	default:
		return nil, fmt.Errorf("%w: format version %d.%d", ErrFormat, pre[6], pre[7])
	}
	header := make([]byte, hlen)
	if _, err := io.ReadFull(br, header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	h, err := parseHeader(string(header))
	if err != nil {
		return nil, err
	}
	n, ok := h.dtype.ByteLen(h.shape)
	if !ok || n > DataLenMax {
		return nil, fmt.Errorf("%w: shape %v of %s exceeds %d bytes", ErrFormat, h.shape, h.dtype, DataLenMax)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(br, data); err != nil {
		return nil, fmt.Errorf("%w: data: %v", ErrFormat, err)
	}
	if extra, _ := br.Peek(1); len(extra) > 0 {
		return nil, fmt.Errorf("%w: bytes after the array data", ErrFormat)
	}
	if h.bigEndian && h.dtype.Size() > 1 {
		swap(data, h.dtype.Size())
	}
	if h.fortran && len(h.shape) > 1 {
		data = fortranToC(data, h.shape, h.dtype.Size())
	}
	return &Array{DType: h.dtype, Shape: h.shape, Data: data}, nil
}

// ReadFile reads an array from a file.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

type header struct {
	dtype     wire.DType
	bigEndian bool
	fortran   bool
	shape     []uint64
}

// parseHeader reads the header: a Python dict literal with exactly the
// keys 'descr', 'fortran_order' and 'shape', as numpy.lib.format writes.
func parseHeader(s string) (header, error) {
	var h header
	bad := func(why string) (header, error) {
		return h, fmt.Errorf("%w: header %q: %s", ErrFormat, strings.TrimSpace(s), why)
	}
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, "{") || !strings.HasSuffix(s, "}") {
		return bad("not a dict")
	}
	p := &lexer{s: s[1 : len(s)-1]}
	seen := map[string]bool{}
	for {
		p.space()
		if p.done() {
			break
		}
		key, ok := p.str()
		if !ok || seen[key] {
			return bad("bad or repeated key")
		}
		seen[key] = true
		p.space()
		if !p.eat(':') {
			return bad("no ':' after " + key)
		}
		p.space()
		switch key {
		case "descr":
			d, ok := p.str()
			if !ok {
				return bad("descr is not a string (structured dtypes are not supported)")
			}
			if len(d) < 2 {
				return bad("descr " + d)
			}
			order, code := d[0], d[1:]
			switch order {
			case '<', '|', '=':
			case '>':
				h.bigEndian = true
			default:
				return bad("descr " + d)
			}
			found := false
			for dt, c := range descrOf {
				if c == code {
					h.dtype, found = dt, true
				}
			}
			if !found {
				return bad("dtype " + d + " has no wire dtype")
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
			default:
				return bad("fortran_order is not True or False")
			}
		case "shape":
			shape, ok := p.tuple()
			if !ok {
				return bad("shape is not a tuple of integers")
			}
			if len(shape) > RankMax {
				return bad(fmt.Sprintf("rank %d above %d", len(shape), RankMax))
			}
			h.shape = shape
		default:
			return bad("unknown key " + key)
		}
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.done() {
				return bad("no ',' between items")
			}
		}
	}
	if !seen["descr"] || !seen["fortran_order"] || !seen["shape"] {
		return bad("missing key")
	}
	return h, nil
}

type lexer struct {
	s string
	i int
}

func (p *lexer) done() bool { return p.i >= len(p.s) }
func (p *lexer) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\n' || p.s[p.i] == '\t') {
		p.i++
	}
}
func (p *lexer) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}
func (p *lexer) word(w string) bool {
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// str reads a quoted string without escapes (keys and descr have none).
func (p *lexer) str() (string, bool) {
	if p.i >= len(p.s) || (p.s[p.i] != '\'' && p.s[p.i] != '"') {
		return "", false
	}
	q := p.s[p.i]
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", false
	}
	v := p.s[p.i+1 : p.i+1+end]
	p.i += end + 2
	return v, !strings.ContainsRune(v, '\\')
}

// tuple reads "(2, 3)", "(3,)" or "()".
func (p *lexer) tuple() ([]uint64, bool) {
	if !p.eat('(') {
		return nil, false
	}
	dims := []uint64{}
	for {
		p.space()
		if p.eat(')') {
			return dims, true
		}
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		v, err := strconv.ParseUint(p.s[start:p.i], 10, 63)
		if err != nil || len(dims) > RankMax {
			return nil, false
		}
		dims = append(dims, v)
		p.space()
		if !p.eat(',') {
			p.space()
			if !p.eat(')') {
				return nil, false
			}
			// "(3)" is not a tuple in Python; numpy never writes it.
			return dims, len(dims) != 1
		}
	}
}

func swap(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		for a, z := i, i+size-1; a < z; a, z = a+1, z-1 {
			b[a], b[z] = b[z], b[a]
		}
	}
}

// fortranToC reorders column-major elements into row-major order.
func fortranToC(src []byte, shape []uint64, size int) []byte {
	dst := make([]byte, len(src))
	n := len(src) / size
	rank := len(shape)
	idx := make([]uint64, rank)
	for c := 0; c < n; c++ {
		// idx is the multi-index of row-major element c; its column-major
		// offset has the first dimension varying fastest.
		off, stride := uint64(0), uint64(1)
		for d := 0; d < rank; d++ {
			off += idx[d] * stride
			stride *= shape[d]
		}
		copy(dst[c*size:(c+1)*size], src[int(off)*size:(int(off)+1)*size])
		for d := rank - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return dst
}

// Write writes a as a version 1.0 file (version 2.0 if its header needs
// it), laid out as numpy.save does: header padded with spaces to a
// multiple of 64 bytes, little-endian C-order data. bf16 is written as f4.
func Write(w io.Writer, a *Array) error {
	dt, data := a.DType, a.Data
	if dt == wire.BF16 {
		data = make([]byte, 2*len(a.Data))
		for i := 0; i+2 <= len(a.Data); i += 2 {
			// bf16 is the top half of an f32: widening is exact.
			binary.LittleEndian.PutUint32(data[2*i:], uint32(binary.LittleEndian.Uint16(a.Data[i:]))<<16)
		}
		dt = wire.F32
	}
	code, ok := descrOf[dt]
	if !ok {
		return fmt.Errorf("npy: dtype %s cannot be written", a.DType)
	}
	if n, ok := dt.ByteLen(a.Shape); !ok || n != len(data) {
		return fmt.Errorf("npy: %d data bytes for shape %v of %s", len(a.Data), a.Shape, a.DType)
	}
	order := "<"
	if dt.Size() == 1 {
		order = "|"
	}
	var shape strings.Builder
	shape.WriteByte('(')
	for i, d := range a.Shape {
		if i > 0 {
			shape.WriteString(", ")
		}
		shape.WriteString(strconv.FormatUint(d, 10))
	}
	if len(a.Shape) == 1 {
		shape.WriteByte(',')
	}
	shape.WriteByte(')')
	dict := fmt.Sprintf("{'descr': '%s%s', 'fortran_order': False, 'shape': %s, }", order, code, shape.String())
	var buf bytes.Buffer
	buf.WriteString(magic)
	pre := 10
	if len(dict)+1+pre > 1<<16 {
		pre = 12
	}
	total := (pre + len(dict) + 1 + 63) &^ 63
	hlen := total - pre
	if pre == 10 {
		buf.Write([]byte{1, 0})
		_ = binary.Write(&buf, binary.LittleEndian, uint16(hlen))
	} else {
		buf.Write([]byte{2, 0})
		_ = binary.Write(&buf, binary.LittleEndian, uint32(hlen))
	}
	buf.WriteString(dict)
	buf.WriteString(strings.Repeat(" ", hlen-len(dict)-1))
	buf.WriteByte('\n')
	if _, err := w.Write(buf.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

// WriteFile writes an array to a file.
func WriteFile(path string, a *Array) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, a); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
