package jobmsg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Paths of the OpenAI front door a job goes to.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
)

// CodeNoFrontDoor: a job for a model served by backends met an appliance
// whose OpenAI front door is off (frontdoor.http_listen empty). The config
// refuses that for the models a stream maps to; a model named otherwise
// (an unmapped subject token, a model added later) ends here.
const CodeNoFrontDoor = "no_front_door"

// CodeBadRequest is the dead letter of a 4xx answer of the front door that
// names no Sluice error code (400, 422, ...).
const CodeBadRequest = "bad_request"

// CodeBadGateway is a 200 answer whose body is not a JSON object: the
// backend failed (retryable, as a 502 is).
const CodeBadGateway = "bad_gateway"

// decodeOpenAI reads a JSON body for a model served by backends: an
// OpenAI completions request, or a chat one when it has "messages". The
// body is sent as it came; only what picks its path, and what would make
// its result no JSON document, is read.
func decodeOpenAI(j *Job, body []byte) *Failure {
	if j.Family != FamilyJSON {
		return DeadLetter(CodeBadMessage, "model %s is served by backends: its requests are OpenAI JSON bodies (%s), not %s",
			j.Model, ContentJSON, j.Family.name())
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return DeadLetter(CodeBadMessage, "the body is not a JSON object (an OpenAI completions or chat request): %v", err)
	}
	var model string
	if raw, ok := top["model"]; !ok || json.Unmarshal(raw, &model) != nil {
		return DeadLetter(CodeBadMessage, "the body names no \"model\" (a string; the subject asks for %s)", j.Model)
	}
	if model != j.Model {
		return DeadLetter(CodeBadMessage, "the body's \"model\" is %q, the subject's %q: they must agree", model, j.Model)
	}
	if raw, ok := top["stream"]; ok && bytes.Equal(bytes.TrimSpace(raw), []byte("true")) {
		return DeadLetter(CodeBadMessage, "\"stream\": true: a job's result is one JSON document (leave stream out, or false)")
	}
	j.Family, j.Body, j.Path = FamilyOpenAI, body, PathCompletions
	if _, ok := top["messages"]; ok {
		j.Path = PathChatCompletions
	}
	return nil
}

func (f Family) name() string {
	switch f {
	case FamilyFrame:
		return ContentFrame
	case FamilySection:
		return ContentSection
	case FamilyOpenAI:
		return "an OpenAI request"
	default:
		return ContentJSON
	}
}

// openAIError is the error body of the OpenAI API, or the front door's
// own refusals' {"error": "message"}.
type openAIError struct {
	Error json.RawMessage `json:"error"`
}

type openAIErrorDetail struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// wireCodes are the Sluice error names a front-door error body may carry
// as its code.
var wireCodes = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range wire.Codes {
		m[c.String()] = true
	}
	return m
}()

// statusCodes name the dead letter of a 4xx answer whose body carries no
// Sluice error name (docs/frontdoor.md, "Errors").
var statusCodes = map[int]string{
	http.StatusBadRequest:            CodeBadRequest,
	http.StatusForbidden:             wire.CodeForbidden.String(),
	http.StatusNotFound:              wire.CodeUnknownModel.String(),
	http.StatusConflict:              wire.CodeReplayed.String(),
	http.StatusRequestEntityTooLarge: wire.CodeFrameTooLarge.String(),
	http.StatusUnprocessableEntity:   CodeBadRequest,
}

// ClassifyHTTP turns a front-door answer other than 200 into a Failure.
// 4xx are dead letters, except 408 and 429, and 401 (the key changed under
// the ingress, as on the wire); every other status is retryable. A 504
// after the message's own deadline passed (expired) is a dead letter
// expired. The code is the body's error code when it is a Sluice error
// name, else one for the status (404 unknown_model, 400 bad_request, ...);
// the message is the body's.
func ClassifyHTTP(status int, body []byte, expired bool) *Failure {
	code, msg := errorBody(body)
	text := fmt.Sprintf("the OpenAI front door answered %d %s", status, http.StatusText(status))
	if msg != "" {
		text += ": " + msg
	}
	switch {
	case status == http.StatusGatewayTimeout && expired:
		return DeadLetter(CodeExpired, "%s (after the message's X-AI-Timeout)", text)
	case status == http.StatusUnauthorized:
		return Retryable(wire.CodeUnauthenticated.String(), "%s (the tenant's key changed?)", text)
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests, status < 400 || status >= 500:
		if code == "" {
			code = fmt.Sprintf("http_%d", status)
		}
		return Retryable(code, "%s", text)
	}
	if code == "" {
		code = statusCodes[status]
	}
	if code == "" {
		code = fmt.Sprintf("http_%d", status)
	}
	return DeadLetter(code, "%s", text)
}

// errorBody reads an error body: its Sluice error name ("" when it has
// none) and its message (the body itself, cut, when it is not one).
func errorBody(body []byte) (code, msg string) {
	var e openAIError
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		return "", cut(string(bytes.TrimSpace(body)), 512)
	}
	var s string
	if json.Unmarshal(e.Error, &s) == nil {
		return "", s
	}
	var d openAIErrorDetail
	if json.Unmarshal(e.Error, &d) != nil {
		return "", cut(string(bytes.TrimSpace(body)), 512)
	}
	var c string
	if json.Unmarshal(d.Code, &c) == nil && wireCodes[c] {
		code = c
	}
	return code, d.Message
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// CheckCompletion checks a 200 answer's body: a JSON object (an OpenAI
// text_completion or chat.completion). Anything else is the backend's
// failure, retryable as a 502 is.
func CheckCompletion(body []byte) *Failure {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 || t[0] != '{' || !json.Valid(body) {
		return Retryable(CodeBadGateway, "the OpenAI front door answered 200 with %d bytes that are not a JSON object: %q",
			len(body), cut(string(body), 128))
	}
	return nil
}
