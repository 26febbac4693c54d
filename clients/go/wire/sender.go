package wire

import "encoding/binary"

// SenderExtKey is the key of the sender extension header (docs/wire.md,
// "Replay windows"); SenderExtLen the length of its value, the sender id.
const (
	SenderExtKey = "sluice-sender"
	SenderExtLen = 8
)

// SenderExtension names sender id (not 0) in a signed frame: the frame's
// request id is then that sender's counter, and the appliance keeps one
// replay window per sender instead of one entry per frame.
func SenderExtension(id uint64) Extension {
	v := make([]byte, SenderExtLen)
	binary.LittleEndian.PutUint64(v, id)
	return Extension{Key: SenderExtKey, Value: v}
}

// SenderID is the id of the frame's first sender header; ok is false when
// it has none, or one that names no sender (not 8 bytes, or 0).
func (f *Frame) SenderID() (id uint64, ok bool) {
	v, found := f.ExtensionValue(SenderExtKey)
	if !found || len(v) != SenderExtLen {
		return 0, false
	}
	id = binary.LittleEndian.Uint64(v)
	return id, id != 0
}
