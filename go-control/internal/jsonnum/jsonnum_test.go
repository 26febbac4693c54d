package jsonnum

import (
	"encoding/json"
	"testing"
)

func TestInt64(t *testing.T) {
	for in, want := range map[string]int64{"7": 7, "7.0": 7, "-3e2": -300, "0": 0, "9223372036854775807": 1<<63 - 1} {
		if got, err := Int64(json.Number(in)); err != nil || got != want {
			t.Errorf("Int64(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"7.5", "1e300", "9223372036854775808", "x", ""} {
		if _, err := Int64(json.Number(in)); err == nil {
			t.Errorf("Int64(%s) accepted", in)
		}
	}
}
