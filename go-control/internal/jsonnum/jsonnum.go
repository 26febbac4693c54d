// Package jsonnum reads JSON integers the way JSON Schema counts them: 7 and
// 7.0 are the same integer (Confluent's Jackson reads both too). Go's
// decoder refuses 7.0 for an int field.
package jsonnum

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Int64 parses n as an integer; an integral fraction or exponent (7.0, 7e0)
// is accepted, anything else is an error.
func Int64(n json.Number) (int64, error) {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	// 2^63 is not representable in int64; floats at or past it are out.
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not an integer in range", string(n))
	}
	return int64(f), nil
}
