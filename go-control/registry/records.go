package registry

// How the registry is laid out in its Store: keys and the JSON records
// under them.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// Store keys.
const (
	keySchemas       = "schemas/"
	keySubjects      = "subjects/"
	keyConfigGlobal  = "config/global"
	keyConfigSubject = "config/subjects/"
	keyNextID        = "meta/next-id"
	keyContracts     = "contracts/"
)

func subjectKey(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
func schemaKey(id int) string    { return fmt.Sprintf("%s%010d", keySchemas, id) }
func contractKey(id int) string  { return fmt.Sprintf("%s%010d", keyContracts, id) }
func versionKey(s string, v int) string {
	return fmt.Sprintf("%s%s/%010d", keySubjects, subjectKey(s), v)
}

type schemaVal struct {
	ID         int         `json:"id"`
	SchemaType compat.Type `json:"schemaType"`
	Schema     string      `json:"schema"`
	References []Reference `json:"references,omitempty"`
}

type versionVal struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Deleted bool   `json:"deleted"`
}

type configVal struct {
	Compatibility compat.Level `json:"compatibility"`
}

type nextIDVal struct {
	Next int `json:"next"`
}

// contractVal is a stored contract snapshot. The canonical form is left
// out when storing it would pass ContractBytesMax (it is then recomputed
// from the schema, whose fingerprint the snapshot keeps), and the field
// list is cut until the value fits.
type contractVal struct {
	ID int `json:"id"`
	compat.Contract
	CanonicalOmitted bool `json:"canonical_omitted,omitempty"`
}

// ContractBytesMax bounds a stored contract snapshot, in bytes.
const ContractBytesMax = 512 << 10

func encodeContract(id int, c compat.Contract) ([]byte, error) {
	v := contractVal{ID: id, Contract: c}
	b, err := json.Marshal(v)
	if err != nil || len(b) <= ContractBytesMax {
		return b, err
	}
	v.Canonical, v.CanonicalOmitted = "", true
	for {
		if b, err = json.Marshal(v); err != nil || len(b) <= ContractBytesMax || len(v.Fields) == 0 {
			return b, err
		}
		v.Fields, v.FieldsTruncated = v.Fields[:len(v.Fields)/2], true
	}
}
