package config

import (
	"encoding/json"
	"fmt"
	"math"
)

// Bounds of the [dpdk] keys for frames larger than one mbuf, mirrored from
// the engine (dataplane/engine/src/transport/dpdk/mod.rs): the daemon
// refuses what the engine would, naming file:line. The rest of [dpdk]
// stays opaque here; the engine checks it when it starts.
const (
	DPDKMTUMin           = 576 // IPv4's minimum reassembly size
	DPDKMTUMax           = 9216
	DPDKSlotsMax         = 4096 // rx_slots and tx_slots, per worker
	DPDKFragEntriesMin   = 16
	DPDKFragEntriesMax   = 65536
	DPDKFragTimeoutMsMax = 30000
	DPDKFragMbufsMin     = 64
	DPDKMbufsMax         = 1 << 20
)

// dpdk checks the large-frame keys of [dpdk] that are present.
func (c *checker) dpdk(t map[string]any) {
	bounds := []struct {
		key    string
		lo, hi int
	}{
		{"mtu", DPDKMTUMin, DPDKMTUMax},
		{"rx_slots", 0, DPDKSlotsMax},
		{"tx_slots", 0, DPDKSlotsMax},
		{"frag_entries_max", DPDKFragEntriesMin, DPDKFragEntriesMax},
		{"frag_timeout_ms", 1, DPDKFragTimeoutMsMax},
		{"frag_mbufs_max", DPDKFragMbufsMin, DPDKMbufsMax},
	}
	if v, ok := t["tx_multi_seg"]; ok {
		s, isString := v.(string)
		if !isString {
			s = fmt.Sprint(v)
		}
		c.oneOf("dpdk.tx_multi_seg", s, "auto", "on", "off")
	}
	for _, b := range bounds {
		v, ok := t[b.key]
		if !ok {
			continue
		}
		n, ok := integer(v)
		if !ok {
			c.add("dpdk."+b.key, "must be an integer")
			continue
		}
		if n < int64(b.lo) || n > int64(b.hi) {
			c.add("dpdk."+b.key, "%d is out of range %d..=%d", n, b.lo, b.hi)
		}
	}
}

// integer reads a whole number as TOML (int64) or JSON (float64,
// json.Number) decoding gives it.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<53 {
			return int64(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}
