package jobs

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// Headers of results and dead letters.
const (
	HeaderKind         = "Sluice-Result"        // "result" or "dead-letter": never run as a request
	HeaderRequestID    = "Sluice-Request-Id"    // STREAM:SEQUENCE of the request message
	HeaderStatus       = "Sluice-Status"        // "ok", or the dead letter's code
	HeaderError        = "Sluice-Error"         // a dead letter's message
	HeaderSubject      = "Sluice-Subject"       // the request's subject
	HeaderModel        = "Sluice-Model"         // model and version the engine ran
	HeaderVersion      = "Sluice-Model-Version" // (the resolved full version)
	HeaderDeliveries   = "Sluice-Deliveries"    // deliveries of the request so far, this one included
	HeaderInputMsgID   = "Sluice-Input-Msg-Id"  // the request's own Nats-Msg-Id, if it had one
	HeaderNatsMsgID    = "Nats-Msg-Id"          // JetStream de-duplication: "sluice:" + request id
	HeaderBodyDropped  = "Sluice-Body-Dropped"  // a dead letter too large to store with its body: why
	KindResult         = "result"
	KindDeadLetter     = "dead-letter"
	msgIDPrefix        = "sluice:"
	natsHeaderPrefix   = "Nats-"
	subjectReplacement = "_"
)

// requestID names a request message for good: its stream and sequence.
func requestID(stream string, seq uint64) string {
	return stream + ":" + strconv.FormatUint(seq, 10)
}

// subjectToken makes a model name one subject token (model names may hold
// '.', '*' or '>').
func subjectToken(s string) string {
	if s == "" {
		return subjectReplacement
	}
	return strings.NewReplacer(".", subjectReplacement, "*", subjectReplacement, ">", subjectReplacement).Replace(s)
}

// outMeta is what every result and dead letter of a message carries.
type outMeta struct {
	id          string // requestID
	subject     string
	deliveries  uint64
	inputMsgID  string
	traceparent string
}

func (m *outMeta) header(kind, status string) nats.Header {
	h := nats.Header{}
	h.Set(HeaderKind, kind)
	h.Set(HeaderRequestID, m.id)
	h.Set(HeaderStatus, status)
	h.Set(HeaderSubject, m.subject)
	h.Set(HeaderDeliveries, strconv.FormatUint(m.deliveries, 10))
	if m.inputMsgID != "" {
		h.Set(HeaderInputMsgID, m.inputMsgID)
	}
	if m.traceparent != "" {
		h.Set(jobmsg.HeaderTraceparent, m.traceparent)
	}
	return h
}

// resultMsg builds the result of j: the body in j's family, to the reply
// subject or the results template.
func (s *streamRunner) resultMsg(m *outMeta, j *jobmsg.Job, resp *sluice.Response) (*nats.Msg, error) {
	subject := j.ReplyTo
	if subject == "" {
		subject = config.RenderSubject(s.cfg.Results, subjectToken(j.Model), s.cfg.Stream)
	}
	var body []byte
	var err error
	if j.Family == jobmsg.FamilyFrame {
		body, err = jobmsg.ResponseFrame(j, resp)
	} else {
		body, err = jobmsg.KServeResponse(m.id, j.KServeID, resp, j.Outputs)
	}
	if err != nil {
		return nil, err
	}
	h := m.header(KindResult, "ok")
	h.Set(jobmsg.HeaderContentType, j.Family.ContentType())
	h.Set(HeaderModel, resp.Model)
	h.Set(HeaderVersion, resp.ModelVersion)
	return &nats.Msg{Subject: subject, Header: h, Data: body}, nil
}

// deadLetterMsg builds a dead letter: the request's body and headers as
// they came (so it can be replayed; JetStream's own Nats-* headers left
// out), with the code and message.
func (s *streamRunner) deadLetterMsg(m *outMeta, model string, in nats.Header, body []byte, f *jobmsg.Failure) *nats.Msg {
	h := m.header(KindDeadLetter, f.Code)
	for k, vs := range in {
		if strings.HasPrefix(k, natsHeaderPrefix) || strings.HasPrefix(k, "Sluice-") {
			continue
		}
		h[k] = append([]string(nil), vs...)
	}
	h.Set(HeaderError, headerText(f.Msg, wire.ErrorMessageLenMax*4))
	if model == "" {
		model = jobmsg.ModelOf(&s.cfg, m.subject)
	}
	return &nats.Msg{
		Subject: config.RenderSubject(s.cfg.DeadLetters, subjectToken(model), s.cfg.Stream),
		Header:  h, Data: body,
	}
}

// headerText makes s one header value: no line breaks, at most n bytes.
func headerText(s string, n int) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if len(s) <= n {
		return s
	}
	return s[:n]
}
