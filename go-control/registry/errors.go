package registry

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/registry/compat"
)

// Confluent Schema Registry error codes.
const (
	CodeSubjectNotFound                = 40401
	CodeVersionNotFound                = 40402
	CodeSchemaNotFound                 = 40403
	CodeSubjectSoftDeleted             = 40404
	CodeSubjectNotSoftDeleted          = 40405
	CodeVersionSoftDeleted             = 40406
	CodeVersionNotSoftDeleted          = 40407
	CodeSubjectCompatibilityNotConfigd = 40408
	CodeIncompatibleSchema             = 409
	CodeInvalidSchema                  = 42201
	CodeInvalidVersion                 = 42202
	CodeInvalidCompatibilityLevel      = 42203
	CodeInvalidMode                    = 42204
	CodeOperationNotPermitted          = 42205
	CodeReferenceExists                = 42206
	CodeInvalidSubject                 = 42208
	CodeStoreError                     = 50001
	CodeOperationTimeout               = 50002
	// Not Confluent's: a body over the limit (the admin API uses 413 too).
	CodeTooLarge = 413
)

// codeNames name the codes in the error body's "code".
var codeNames = map[int]string{
	CodeSubjectNotFound:                "subject_not_found",
	CodeVersionNotFound:                "version_not_found",
	CodeSchemaNotFound:                 "schema_not_found",
	CodeSubjectSoftDeleted:             "subject_soft_deleted",
	CodeSubjectNotSoftDeleted:          "subject_not_soft_deleted",
	CodeVersionSoftDeleted:             "version_soft_deleted",
	CodeVersionNotSoftDeleted:          "version_not_soft_deleted",
	CodeSubjectCompatibilityNotConfigd: "subject_compatibility_not_configured",
	CodeIncompatibleSchema:             "incompatible_schema",
	CodeInvalidSchema:                  "invalid_schema",
	CodeInvalidVersion:                 "invalid_version",
	CodeInvalidCompatibilityLevel:      "invalid_compatibility_level",
	CodeInvalidMode:                    "invalid_mode",
	CodeOperationNotPermitted:          "operation_not_permitted",
	CodeReferenceExists:                "reference_exists",
	CodeInvalidSubject:                 "invalid_subject",
	CodeStoreError:                     "store_error",
	CodeOperationTimeout:               "outcome_unknown",
	CodeTooLarge:                       api.CodeTooLarge,
	400:                                "bad_request",
	404:                                api.CodeNotFound,
	405:                                api.CodeMethodNotAllowed,
}

// CodeName names a registry error code; codes without a name are "error".
func CodeName(code int) string {
	if n, ok := codeNames[code]; ok {
		return n
	}
	return "error"
}

// Error is a registry failure with its Confluent error code and HTTP status.
type Error struct {
	Code    int
	Status  int
	Message string
	// Messages lists what breaks, for CodeIncompatibleSchema, and
	// Differences the differences they were rendered from.
	Messages    []string
	Differences []compat.VersionDifference
	cause       error
}

func (e *Error) Error() string { return fmt.Sprintf("%s (error code %d)", e.Message, e.Code) }

// Unwrap exposes the store failure behind a CodeStoreError.
func (e *Error) Unwrap() error { return e.cause }

func newErr(code, status int, format string, args ...any) *Error {
	return &Error{Code: code, Status: status, Message: fmt.Sprintf(format, args...)}
}

func errSubjectNotFound(s string) *Error {
	return newErr(CodeSubjectNotFound, http.StatusNotFound, "Subject '%s' not found.", s)
}

func errVersionNotFound(v int) *Error {
	return newErr(CodeVersionNotFound, http.StatusNotFound, "Version %d not found.", v)
}

func errSchemaNotFound() *Error {
	return newErr(CodeSchemaNotFound, http.StatusNotFound, "Schema not found")
}

func errSchemaIDNotFound(id int) *Error {
	return newErr(CodeSchemaNotFound, http.StatusNotFound, "Schema %d not found", id)
}

func errSubjectSoftDeleted(s string) *Error {
	return newErr(CodeSubjectSoftDeleted, http.StatusNotFound,
		"Subject '%s' was soft deleted.Set permanent=true to delete permanently", s)
}

func errSubjectNotSoftDeleted(s string) *Error {
	return newErr(CodeSubjectNotSoftDeleted, http.StatusNotFound,
		"Subject '%s' was not deleted first before being permanently deleted", s)
}

func errVersionSoftDeleted(s string, v int) *Error {
	return newErr(CodeVersionSoftDeleted, http.StatusNotFound,
		"Subject '%s' Version %d was soft deleted.Set permanent=true to delete permanently", s, v)
}

func errVersionNotSoftDeleted(s string, v int) *Error {
	return newErr(CodeVersionNotSoftDeleted, http.StatusNotFound,
		"Subject '%s' Version %d was not deleted first before being permanently deleted", s, v)
}

func errSubjectConfigNotSet(s string) *Error {
	return newErr(CodeSubjectCompatibilityNotConfigd, http.StatusNotFound,
		"Subject '%s' does not have subject-level compatibility configured", s)
}

func errInvalidSchema(format string, args ...any) *Error {
	return newErr(CodeInvalidSchema, http.StatusUnprocessableEntity, format, args...)
}

func errInvalidVersion(v string) *Error {
	return newErr(CodeInvalidVersion, http.StatusUnprocessableEntity,
		"The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", v)
}

func errInvalidLevel() *Error {
	return newErr(CodeInvalidCompatibilityLevel, http.StatusUnprocessableEntity,
		"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")
}

func errInvalidSubject(s string) *Error {
	return newErr(CodeInvalidSubject, http.StatusUnprocessableEntity, "The specified subject '%s' is not valid.", s)
}

func errReferenceExists(s string, v int, by []string) *Error {
	return newErr(CodeReferenceExists, http.StatusUnprocessableEntity,
		"One or more references exist to the schema {subject=%s, version=%d}: referenced by %v", s, v, by)
}

func errTooLarge(limit int64) *Error {
	return newErr(CodeTooLarge, http.StatusRequestEntityTooLarge, "request body is over %d bytes", limit)
}

// errStore reports a store failure with what it means for the write: a
// shared store that may still apply it answers 504 (outcome unknown), one
// that refused it before writing 503 (retry); anything else is 500.
func errStore(err error) *Error {
	var e *Error
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		e = newErr(CodeOperationTimeout, http.StatusGatewayTimeout,
			"Outcome unknown: the store did not answer in time and may still apply this write; "+
				"read it back, or repeat the same request (a registration of the same schema is idempotent): %v", err)
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrRevisionMismatch):
		e = newErr(CodeStoreError, http.StatusServiceUnavailable, "Not stored, nothing changed; retry: %v", err)
	default:
		e = newErr(CodeStoreError, http.StatusInternalServerError, "Error while storing: %v", err)
	}
	e.cause = err
	return e
}
