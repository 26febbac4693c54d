package heatmap

import (
	_ "embed"
	"net/http"
)

// page is the heatmap: one self-contained file (plain canvas, no library,
// no request but its own GET /v1/load and, for the backends panel, GET
// /v1/status).
//
//go:embed page.html
var page []byte

// ServePage answers GET /ui/heatmap.
func ServePage(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
	w.Write(page)
}
