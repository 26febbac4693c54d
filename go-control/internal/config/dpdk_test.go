package config

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDPDKLargeFrameKeys(t *testing.T) {
	cases := []struct{ src, want string }{
		{"[dpdk]\nvdevs = [\"x\"]\nmtu = 100\n", "t.toml:3: dpdk.mtu: 100 is out of range 576..=9216"},
		{"[dpdk]\nmtu = 65000\n", "t.toml:2: dpdk.mtu: 65000 is out of range"},
		{"[dpdk]\nrx_slots = 5000\n", "t.toml:2: dpdk.rx_slots: 5000 is out of range 0..=4096"},
		{"[dpdk]\n\ntx_slots = -1\n", "t.toml:3: dpdk.tx_slots: -1 is out of range"},
		{"[dpdk]\nfrag_entries_max = 1\n", "t.toml:2: dpdk.frag_entries_max: 1 is out of range 16..=65536"},
		{"[dpdk]\nfrag_timeout_ms = 0\n", "t.toml:2: dpdk.frag_timeout_ms: 0 is out of range 1..=30000"},
		{"[dpdk]\nfrag_mbufs_max = 8\n", "t.toml:2: dpdk.frag_mbufs_max: 8 is out of range 64..="},
		{"[dpdk]\nmtu = \"jumbo\"\n", "t.toml:2: dpdk.mtu: must be an integer"},
		{"[dpdk]\ntx_multi_seg = \"maybe\"\n", "t.toml:2: dpdk.tx_multi_seg: \"maybe\" is not one of"},
	}
	for _, tc := range cases {
		got := parseErr(t, tc.src)
		if !strings.Contains(got, tc.want) {
			t.Errorf("error\n  %s\nwant it to contain\n  %s", got, tc.want)
		}
	}
	cfg, err := Parse("t.toml", []byte("[dpdk]\nvdevs = [\"x\"]\nmtu = 9000\nrx_slots = 0\nfrag_timeout_ms = 2000\ntx_multi_seg = \"on\"\n"))
	if err != nil {
		t.Fatalf("valid large-frame keys refused: %v", err)
	}
	if cfg.DPDK["mtu"] != int64(9000) {
		t.Fatalf("mtu not kept for the engine: %#v", cfg.DPDK["mtu"])
	}
}

func TestIntegerFromTOMLAndJSON(t *testing.T) {
	for _, v := range []any{int64(9000), 9000, float64(9000), json.Number("9000")} {
		if n, ok := integer(v); !ok || n != 9000 {
			t.Errorf("%#v read as %d, %v", v, n, ok)
		}
	}
	for _, v := range []any{1.5, "9000", json.Number("9e99"), true} {
		if _, ok := integer(v); ok {
			t.Errorf("%#v read as an integer", v)
		}
	}
}
