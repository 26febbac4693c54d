package wire

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// docs/wire.md's tables against this package, so that a code or dtype added
// to the spec shows up here.

func wireMD(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestErrorCodeTableMatchesSpec(t *testing.T) {
	md := wireMD(t)
	section := md[strings.Index(md, "## Error codes"):]
	section = section[:strings.Index(section, "\n## Versioning")]
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		var code int
		if _, err := fmt.Sscanf(line, "| %d |", &code); err != nil {
			continue
		}
		rows++
		c := Code(code)
		retry := "no"
		if c.Retryable() {
			retry = "yes"
		}
		want := fmt.Sprintf("| %d | `%s` | %s |", code, c, retry)
		if !strings.HasPrefix(line, want) {
			t.Errorf("spec row %q, this package says %q", line, want)
		}
	}
	if rows != len(Codes) {
		t.Fatalf("spec lists %d codes, this package %d", rows, len(Codes))
	}
}

func TestDTypeTableMatchesSpec(t *testing.T) {
	md := wireMD(t)
	section := md[strings.Index(md, "## Dtypes"):]
	section = section[:strings.Index(section, "\n## Authentication")]
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		var code int
		if _, err := fmt.Sscanf(line, "| %d |", &code); err != nil {
			continue
		}
		rows++
		d := DType(code)
		cells := strings.Split(line, "|")
		name := strings.Trim(strings.TrimSpace(cells[3]), "`")
		size := strings.TrimSpace(cells[4])
		if !d.Valid() || d.String() != name || !strings.HasPrefix(size, fmt.Sprint(d.Size())) {
			t.Errorf("spec row %q: this package has %s of %d bytes", line, d, d.Size())
		}
	}
	if rows != len(DTypes) {
		t.Fatalf("spec lists %d dtypes, this package %d", rows, len(DTypes))
	}
	for c := 0; c < 256; c++ {
		valid := false
		for _, d := range DTypes {
			valid = valid || int(d) == c
		}
		if DType(c).Valid() != valid {
			t.Errorf("dtype %d: Valid %v", c, !valid)
		}
	}
}

func TestParseErrorTableMatchesSpec(t *testing.T) {
	md := wireMD(t)
	for _, e := range Errors {
		row := fmt.Sprintf("| `%s` |", e.Name())
		i := strings.Index(md, row)
		if i < 0 {
			t.Errorf("docs/wire.md has no row for %s", e.Name())
			continue
		}
		line := md[i : i+strings.Index(md[i:], "\n")]
		want := fmt.Sprintf("`%s` (%d) |", e.Code(), e.Code())
		if !strings.HasSuffix(line, want) {
			t.Errorf("row %q: this package answers with %s", line, want)
		}
	}
}
