package daemon

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// Causes of requests the admin API refuses before any handler runs: the
// cause label of sluice_admin_requests_refused_total.
const (
	refusedToken       = "unauthorized" // 401: admin token missing or wrong
	refusedHost        = "host"         // 421: Host names no local address
	refusedOrigin      = "origin"       // 403: a browser write from another site
	refusedContentType = "content_type" // 415: a write body of the wrong type
)

var refusalCauses = []string{refusedToken, refusedHost, refusedOrigin, refusedContentType}

// refusals counts them by cause (a fixed set: plain atomics).
type refusals struct {
	n [4]atomic.Uint64 // in refusalCauses order
}

func (r *refusals) add(cause string) {
	if i := slices.Index(refusalCauses, cause); i >= 0 {
		r.n[i].Add(1)
	}
}

func (r *refusals) get(cause string) uint64 {
	if i := slices.Index(refusalCauses, cause); i >= 0 {
		return r.n[i].Load()
	}
	return 0
}

// rawBodies are the writes whose body is not JSON, with the types they
// take; every other POST, PUT or PATCH with a body takes JSON.
var rawBodies = []struct {
	method, prefix string
	types          []string
}{
	{http.MethodPut, "/v1/transforms/", []string{"application/wasm", "application/octet-stream"}},
}

// guard refuses what a web page could make a browser send the admin API
// (which has no token on loopback): a Host that is not a local name (DNS
// rebinding: a page of evil.example whose name now resolves to 127.0.0.1),
// a write from another site (Origin, Sec-Fetch-Site), and a write body
// that is not JSON (text/plain and form posts are what a page may send
// across sites without asking). curl, sluicectl and other non-browser
// clients send no Origin and are not affected.
type guard struct {
	next http.Handler
	// checkHost: admin_listen is a loopback TCP address, so every honest
	// Host is a loopback name. Off loopback the token guards, and the
	// names the host is reached by are not known here; a unix socket is
	// out of a browser's reach.
	checkHost  bool
	listenHost string
	csrf       *http.CrossOriginProtection
	refused    *refusals
}

func newGuard(listen string, refused *refusals, next http.Handler) *guard {
	g := &guard{next: next, csrf: http.NewCrossOriginProtection(), refused: refused}
	if !strings.HasPrefix(listen, "unix:") {
		if host, _, err := net.SplitHostPort(listen); err == nil && isLoopbackName(host) {
			g.checkHost, g.listenHost = true, strings.ToLower(host)
		}
	}
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.checkHost && !g.localHost(r.Host) {
		g.refuse(w, r, refusedHost, http.StatusMisdirectedRequest, api.CodeMisdirectedHost,
			fmt.Sprintf("Host %q is not a name of this loopback listener (%s): use localhost, 127.0.0.1 or [::1]", r.Host, g.listenHost))
		return
	}
	if err := g.csrf.Check(r); err != nil {
		g.refuse(w, r, refusedOrigin, http.StatusForbidden, api.CodeCrossOrigin,
			fmt.Sprintf("%s %s from another site (Origin %q) is refused: the admin API takes writes from its own pages and from non-browser clients only", r.Method, r.URL.Path, r.Header.Get("Origin")))
		return
	}
	if hasBody(r) {
		if want := bodyTypes(r); !typeOK(r.Header.Get("Content-Type"), want) {
			g.refuse(w, r, refusedContentType, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType,
				fmt.Sprintf("%s %s: Content-Type %q is refused; send %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), strings.Join(want, " or ")))
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// refuse answers with the error body, in the registry's content type on
// its paths (its clients read no other).
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, cause string, status int, code, msg string) {
	g.refused.add(cause)
	ct := contentType
	if r.URL.Path == RegistryPrefix || strings.HasPrefix(r.URL.Path, RegistryPrefix+"/") {
		ct = registry.ContentType
	}
	api.WriteError(w, status, ct, api.Error{ErrorCode: status, Message: msg, Code: code})
}

// localHost reports whether a Host header names this loopback listener:
// its own address, a loopback IP, localhost or a name under .localhost
// (RFC 6761: never resolved by DNS, so never rebound). Any port: a
// tunnel may forward another. An empty Host is no browser's.
func (g *guard) localHost(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == g.listenHost || isLoopbackName(host)
}

// isLoopbackName reports whether host is a loopback IP or a localhost name.
func isLoopbackName(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// hasBody reports whether r is a write that carries a body (a length
// unknown, chunked, counts as one).
func hasBody(r *http.Request) bool {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		return r.ContentLength != 0
	}
	return false
}

// bodyTypes lists the media types a write's body may have.
func bodyTypes(r *http.Request) []string {
	for _, b := range rawBodies {
		if r.Method == b.method && strings.HasPrefix(r.URL.Path, b.prefix) {
			return b.types
		}
	}
	return []string{"application/json", "a +json type (application/vnd.schemaregistry.v1+json)"}
}

// typeOK reports whether a Content-Type is one of want; JSON bodies take
// application/json and any +json type, as the registry's clients send.
func typeOK(ct string, want []string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if want[0] == "application/json" {
		return mt == "application/json" || strings.HasSuffix(mt, "+json")
	}
	return slices.Contains(want, mt)
}
